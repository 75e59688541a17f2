//go:build verbs

package verbs

/*
#cgo LDFLAGS: -libverbs -lrdmacm
#include "cverbs.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"syscall"
	"unsafe"
)

// Device is one RDMA device and its ports.
type Device struct {
	Name     string
	NodeGUID string
	// Transport is "InfiniBand", "iWARP", "RoCE" (InfiniBand transport on an
	// Ethernet link layer), "usNIC", "unspecified" or "unknown".
	Transport string
	Ports     []DevicePort
}

// DevicePort is one port of a Device.
type DevicePort struct {
	Num       int
	State     string // "ACTIVE", "DOWN", "INIT", "ARMED", "ACTIVE_DEFER", "NOP"
	LinkLayer string // "InfiniBand", "Ethernet"
	MTU       int    // active MTU in bytes
	GIDs      []string
	NetDev    string // the network interface of GID 0 (RoCE, iWARP), "" if none
}

// Devices lists the RDMA devices (ibv_get_device_list) with their ports.
// It returns an empty list and a nil error when there are none.
func Devices() ([]Device, error) {
	var n C.int
	list, err := C.ibv_get_device_list(&n)
	if list == nil {
		if errors.Is(err, syscall.ENOSYS) || errors.Is(err, syscall.ENODEV) || errors.Is(err, syscall.ENOENT) || err == nil {
			return []Device{}, nil
		}
		return nil, fmt.Errorf("verbs: ibv_get_device_list: %w", err)
	}
	defer C.ibv_free_device_list(list)
	devs := unsafe.Slice(list, int(n))
	out := make([]Device, 0, len(devs))
	for _, d := range devs {
		dev, err := describe(d)
		if err != nil {
			return out, err
		}
		out = append(out, dev)
	}
	return out, nil
}

func describe(d *C.struct_ibv_device) (Device, error) {
	dev := Device{Name: C.GoString(C.ibv_get_device_name(d))}
	dev.NodeGUID = formatGUID(uint64(C.ibv_get_device_guid(d)))
	ctx, err := C.ibv_open_device(d)
	if ctx == nil {
		return dev, fmt.Errorf("verbs: ibv_open_device %s: %w", dev.Name, err)
	}
	defer C.ibv_close_device(ctx)
	var attr C.struct_ibv_device_attr
	if rc := C.ibv_query_device(ctx, &attr); rc != 0 {
		return dev, fmt.Errorf("verbs: ibv_query_device %s: %w", dev.Name, syscall.Errno(rc))
	}
	for i := 1; i <= int(attr.phys_port_cnt); i++ {
		var pa C.struct_rd_port
		if rc := C.rd_query_port(ctx, C.int(i), &pa); rc != 0 {
			return dev, fmt.Errorf("verbs: ibv_query_port %s/%d: %w", dev.Name, i, syscall.Errno(rc))
		}
		p := DevicePort{Num: i, State: portState(int(pa.state)), MTU: int(pa.mtu)}
		switch pa.link_layer {
		case C.IBV_LINK_LAYER_ETHERNET:
			p.LinkLayer = "Ethernet"
		default:
			p.LinkLayer = "InfiniBand"
		}
		var g [16]byte
		for k := 0; k < int(pa.gid_tbl_len) && k < 256; k++ {
			if C.rd_query_gid(ctx, C.int(i), C.int(k), (*C.uint8_t)(&g[0])) != 0 {
				break
			}
			if g == ([16]byte{}) {
				continue
			}
			p.GIDs = append(p.GIDs, formatGID(g))
		}
		p.NetDev = portNetDev(dev.Name, i)
		dev.Ports = append(dev.Ports, p)
	}
	switch d.transport_type {
	case C.IBV_TRANSPORT_IWARP:
		dev.Transport = "iWARP"
	case C.IBV_TRANSPORT_IB:
		dev.Transport = "InfiniBand"
		if len(dev.Ports) > 0 && dev.Ports[0].LinkLayer == "Ethernet" {
			dev.Transport = "RoCE"
		}
	case C.IBV_TRANSPORT_USNIC, C.IBV_TRANSPORT_USNIC_UDP:
		dev.Transport = "usNIC"
	case C.IBV_TRANSPORT_UNSPECIFIED:
		dev.Transport = "unspecified"
	default:
		dev.Transport = "unknown"
	}
	return dev, nil
}

func portState(s int) string {
	switch s {
	case C.IBV_PORT_NOP:
		return "NOP"
	case C.IBV_PORT_DOWN:
		return "DOWN"
	case C.IBV_PORT_INIT:
		return "INIT"
	case C.IBV_PORT_ARMED:
		return "ARMED"
	case C.IBV_PORT_ACTIVE:
		return "ACTIVE"
	case C.IBV_PORT_ACTIVE_DEFER:
		return "ACTIVE_DEFER"
	}
	return fmt.Sprintf("state-%d", s)
}

// portNetDev reads the network device of GID 0 from sysfs (rdma-core has
// no verb for it).
func portNetDev(dev string, port int) string {
	b, err := os.ReadFile(fmt.Sprintf("/sys/class/infiniband/%s/ports/%d/gid_attrs/ndevs/0", dev, port))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// formatGUID prints a node GUID (network byte order in a uint64) as
// ibv_devinfo does: 0011:2233:4455:6677.
func formatGUID(v uint64) string {
	b := (*[8]byte)(unsafe.Pointer(&v))
	return fmt.Sprintf("%02x%02x:%02x%02x:%02x%02x:%02x%02x", b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7])
}

func formatGID(g [16]byte) string {
	return net.IP(g[:]).String()
}
