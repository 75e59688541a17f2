// Command isertarget runs rdisk's iSCSI/iSER portal on a RAM disk, for the
// interop lab and for running libiscsi's tools by hand before `rdisk
// target` serves iSCSI itself.
package main

import (
	"context"
	"crypto/rand"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"

	"github.com/rdisk/rdisk/backstore"
	"github.com/rdisk/rdisk/iser"
	"github.com/rdisk/rdisk/iser/target"
	"github.com/rdisk/rdisk/rdma/iwarp"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:3260", "portal address")
	iqn := flag.String("iqn", "iqn.2026-11.io.rdisk:default", "target name")
	size := flag.Int64("size", 1<<30, "RAM disk size in bytes")
	bs := flag.Int("block-size", 512, "block size")
	luns := flag.Int("luns", 1, "number of LUNs (each a RAM disk of -size)")
	chapUser := flag.String("chap-user", "", "CHAP user the initiator must log in as")
	chapSecret := flag.String("chap-secret", "", "CHAP secret")
	debug := flag.Bool("debug", false, "debug logging")
	fill := flag.Bool("fill", false, "fill the RAM disks with random data first")
	cpuprof := flag.String("cpuprofile", "", "write a CPU profile here")
	flag.Parse()
	if *cpuprof != "" {
		f, err := os.Create(*cpuprof)
		if err == nil {
			pprof.StartCPUProfile(f)
			defer pprof.StopCPUProfile()
		}
	}
	lvl := slog.LevelInfo
	if os.Getenv("TRACE") != "" {
		lvl = -8
	}
	if *debug && lvl > slog.LevelDebug {
		lvl = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
	p, err := iwarp.New(iwarp.Config{Logger: log})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	tc := target.TargetConfig{Name: *iqn}
	for i := range *luns {
		d, err := backstore.NewMem(*size, *bs)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		if *fill {
			buf := make([]byte, 1<<20)
			for off := int64(0); off < *size; off += int64(len(buf)) {
				rand.Read(buf)
				if err := d.WriteAt(buf[:min(int64(len(buf)), *size-off)], off, 0); err != nil {
					fmt.Fprintln(os.Stderr, err)
					os.Exit(1)
				}
			}
		}
		tc.LUNs = append(tc.LUNs, target.LUNConfig{LUN: uint64(i), Disk: d})
	}
	if *chapUser != "" {
		tc.CHAP = &iser.CHAPSecret{User: *chapUser, Secret: *chapSecret}
	}
	t, err := target.New(target.Config{Targets: []target.TargetConfig{tc}, Provider: p, Logger: log})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("isertarget: serving %s on %s\n  iscsi://%s/%s/0\n  iser://%s/%s/0\n", *iqn, ln.Addr(), ln.Addr(), *iqn, ln.Addr(), *iqn)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() { <-ctx.Done(); t.Close() }()
	err = t.Serve(ctx, ln)
	t.Close()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
}
