//go:build verbs

package verbs

/*
#include "cverbs.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"syscall"
	"unsafe"

	"github.com/rdisk/rdisk/rdma"
)

type protDomain struct {
	p  *Provider
	pd *C.struct_ibv_pd

	zeroOnce sync.Once
	zeroBuf  unsafe.Pointer // C memory
	zeroMR   *C.struct_ibv_mr
}

// zeroSGE returns an empty scatter entry naming a small MR of the PD:
// libsiw refuses receives without scatter entries, so a zero-length
// receive carries this one.
func (pd *protDomain) zeroSGE() (C.struct_rd_sge, error) {
	pd.zeroOnce.Do(func() {
		pd.zeroBuf = C.calloc(1, 64)
		pd.zeroMR = C.ibv_reg_mr(pd.pd, pd.zeroBuf, 64, C.IBV_ACCESS_LOCAL_WRITE)
	})
	if pd.zeroMR == nil {
		return C.struct_rd_sge{}, errors.New("verbs: cannot register the PD's scratch MR")
	}
	return C.struct_rd_sge{addr: C.uint64_t(uintptr(pd.zeroBuf)), length: 0, lkey: pd.zeroMR.lkey}, nil
}

func (pd *protDomain) Close() error {
	if pd.zeroMR != nil {
		C.ibv_dereg_mr(pd.zeroMR)
	}
	if pd.zeroBuf != nil {
		C.free(pd.zeroBuf)
	}
	if rc := C.ibv_dealloc_pd(pd.pd); rc != 0 {
		return fmt.Errorf("verbs: ibv_dealloc_pd: %v", syscall.Errno(rc))
	}
	return nil
}

func ibvAccess(a rdma.Access) C.int {
	var f C.int
	if a&(rdma.AccessLocalWrite|rdma.AccessRemoteWrite) != 0 {
		// verbs refuses remote write without local write.
		f |= C.IBV_ACCESS_LOCAL_WRITE
	}
	if a&rdma.AccessRemoteWrite != 0 {
		f |= C.IBV_ACCESS_REMOTE_WRITE
	}
	if a&rdma.AccessRemoteRead != 0 {
		f |= C.IBV_ACCESS_REMOTE_READ
	}
	return f
}

// RegisterMemory implements rdma.PD with ibv_reg_mr over buf. The buffer's
// Go object is pinned (runtime.Pinner) until Deregister, so the adapter's
// references stay valid: the GC neither moves nor frees it.
func (pd *protDomain) RegisterMemory(buf []byte, access rdma.Access) (rdma.MR, error) {
	if len(buf) == 0 {
		return nil, errors.New("verbs: cannot register an empty buffer")
	}
	m := &mr{pd: pd, buf: buf, access: access}
	ptr := unsafe.Pointer(unsafe.SliceData(buf))
	m.pin.Pin(ptr)
	h, err := C.ibv_reg_mr(pd.pd, ptr, C.size_t(len(buf)), ibvAccess(access))
	if h == nil {
		m.pin.Unpin()
		return nil, fmt.Errorf("verbs: ibv_reg_mr of %d bytes: %v", len(buf), err)
	}
	m.h = h
	m.addr = uint64(uintptr(ptr))
	m.lkey, m.rkey = uint32(h.lkey), uint32(h.rkey)
	return m, nil
}

type mr struct {
	pd         *protDomain
	h          *C.struct_ibv_mr
	buf        []byte
	access     rdma.Access
	addr       uint64
	lkey, rkey uint32
	pin        runtime.Pinner
	mu         sync.Mutex
	dead       bool
}

func (m *mr) LKey() uint32        { return m.lkey }
func (m *mr) RKey() uint32        { return m.rkey }
func (m *mr) VA() uint64          { return m.addr }
func (m *mr) Bytes() []byte       { return m.buf }
func (m *mr) Access() rdma.Access { return m.access }

func (m *mr) Deregister() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.dead {
		return nil
	}
	m.dead = true
	rc := C.ibv_dereg_mr(m.h)
	m.pin.Unpin()
	if rc != 0 {
		return fmt.Errorf("verbs: ibv_dereg_mr: %v", syscall.Errno(rc))
	}
	return nil
}

// AllocFastRegMR implements rdma.PD. libibverbs has no IB_WR_REG_MR (fast
// registration is a kernel verb), so each Map registers the range as its
// own MR (ibv_reg_mr, a system call) with a fresh key, and invalidation
// (local, remote by Send with Invalidate, or Invalidate) ends that key;
// the registration is released at the next Map or Close.
func (pd *protDomain) AllocFastRegMR(maxLen int) (rdma.FastRegMR, error) {
	if maxLen <= 0 {
		return nil, errors.New("verbs: fast registration length must be positive")
	}
	return &fastReg{pd: pd, maxLen: maxLen}, nil
}

type fastReg struct {
	pd      *protDomain
	maxLen  int
	mu      sync.Mutex
	h       *C.struct_ibv_mr
	rkey    uint32
	valid   bool
	lastKey uint32
	closed  bool
}

func (f *fastReg) release() {
	if f.h != nil {
		f.pd.p.mu.Lock()
		if f.pd.p.frs[f.rkey] == f {
			delete(f.pd.p.frs, f.rkey)
		}
		f.pd.p.mu.Unlock()
		C.ibv_dereg_mr(f.h)
		f.h = nil
	}
}

func (f *fastReg) Map(mi rdma.MR, off, length int, access rdma.Access) (uint32, uint64, error) {
	m, ok := mi.(*mr)
	if !ok || m.pd != f.pd {
		return 0, 0, errors.New("verbs: fast registration needs an MR of the same PD")
	}
	if off < 0 || length <= 0 || off+length > len(m.buf) || length > f.maxLen {
		return 0, 0, rdma.ErrBadSGE
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return 0, 0, rdma.ErrClosed
	}
	if f.valid {
		return 0, 0, errors.New("verbs: fast registration key is still valid")
	}
	f.release()
	va := m.addr + uint64(off)
	reg := func() (*C.struct_ibv_mr, error) {
		h, err := C.ibv_reg_mr(f.pd.pd, unsafe.Pointer(&m.buf[off]), C.size_t(length), ibvAccess(access))
		if h == nil {
			return nil, fmt.Errorf("verbs: ibv_reg_mr for fast registration: %v", err)
		}
		return h, nil
	}
	h, err := reg()
	if err != nil {
		return 0, 0, err
	}
	if uint32(h.rkey) == f.lastKey {
		h2, err := reg()
		C.ibv_dereg_mr(h)
		if err != nil {
			return 0, 0, err
		}
		h = h2
	}
	f.h, f.rkey, f.valid, f.lastKey = h, uint32(h.rkey), true, uint32(h.rkey)
	f.pd.p.mu.Lock()
	f.pd.p.frs[f.rkey] = f
	f.pd.p.mu.Unlock()
	return f.rkey, va, nil
}

func (f *fastReg) Invalidate() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.valid = false
	f.release()
	return nil
}

func (f *fastReg) RKey() uint32 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.rkey
}

func (f *fastReg) Valid() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.valid
}

func (f *fastReg) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed, f.valid = true, false
	f.release()
	return nil
}

// invalidated records that the device invalidated key (a local invalidate
// completed, or a Send with Invalidate arrived).
func (p *Provider) invalidated(key uint32) {
	p.mu.Lock()
	f := p.frs[key]
	p.mu.Unlock()
	if f != nil {
		f.mu.Lock()
		if f.rkey == key {
			f.valid = false
		}
		f.mu.Unlock()
	}
}

// fastRegKey returns the emulated fast-registration MR whose current key
// is key, or nil.
func (p *Provider) fastRegKey(key uint32) *fastReg {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.frs[key]
}

// invalidateKey ends key in software, if it is still f's.
func (f *fastReg) invalidateKey(key uint32) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.rkey == key && f.h != nil {
		f.valid = false
		f.release()
	}
}
