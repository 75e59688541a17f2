// Command rawperf measures what plain Go over loopback TCP reaches on this
// machine, as the baselines scripts/bench-all.sh divides rdisk's figures
// by. The shapes are those of the project's peer baselines (a single
// stream of 128 KiB writes; fixed-size requests answered by fixed-size
// responses, pipelined to a depth):
//
//	rawperf stream-recv -addr 127.0.0.1:15301 &
//	rawperf stream-send -addr 127.0.0.1:15301 -dur 5s -wsize 131072
//	rawperf pp-server -addr 127.0.0.1:15401 -conns 4 -resp 4096 &
//	rawperf pp-client -addr 127.0.0.1:15401 -conns 4 -depth 32 -resp 4096 -dur 5s
//
// Each client prints one RESULT line of key=value words. stream-send
// reports what the receiver counted (the receiver writes its byte count
// back before closing). pp-client at depth 1 is a synchronous write/read
// loop that also reports latency percentiles; above depth 1 a writer
// goroutine batches requests into one write() whenever no credit is free
// and the server flushes its responses whenever its input buffer holds no
// whole request. Both sides refuse non-loopback addresses and stop at
// -timeout.
package main

import (
	"bufio"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rdisk/rdisk/internal/latency"
	"github.com/rdisk/rdisk/internal/sysmon"
)

type options struct {
	addr         string
	conns, depth int
	req, resp    int
	wsize, rsize int
	dur, warmup  time.Duration
	timeout      time.Duration
	slack        time.Duration
	deadline     time.Time
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: rawperf stream-recv|stream-send|pp-server|pp-client [flags]")
		os.Exit(2)
	}
	mode := os.Args[1]
	fs := flag.NewFlagSet("rawperf "+mode, flag.ContinueOnError)
	var o options
	fs.StringVar(&o.addr, "addr", "127.0.0.1:15301", "loopback address")
	fs.IntVar(&o.conns, "conns", 1, "pp: connections (the server exits after serving this many)")
	fs.IntVar(&o.depth, "depth", 1, "pp-client: requests in flight per connection")
	fs.IntVar(&o.req, "req", 64, "pp: request size in bytes")
	fs.IntVar(&o.resp, "resp", 4096, "pp: response size in bytes")
	fs.IntVar(&o.wsize, "wsize", 128<<10, "stream-send: bytes per write()")
	fs.IntVar(&o.rsize, "rsize", 128<<10, "stream-recv: bytes per read()")
	fs.DurationVar(&o.dur, "dur", 5*time.Second, "client: measured interval")
	fs.DurationVar(&o.warmup, "warmup", time.Second, "pp-client: unmeasured lead-in")
	fs.DurationVar(&o.timeout, "timeout", 120*time.Second, "hard limit for either side")
	fs.DurationVar(&o.slack, "sysmon-slack", 0, "timer slack of the Go runtime's monitor thread, as rdisk's --sysmon-slack (0: leave it)")
	if err := fs.Parse(os.Args[2:]); err != nil {
		os.Exit(2)
	}
	if err := o.check(); err != nil {
		fmt.Fprintln(os.Stderr, "rawperf:", err)
		os.Exit(2)
	}
	if o.slack > 0 {
		if _, err := sysmon.SetSlack(o.slack); err != nil {
			fmt.Fprintln(os.Stderr, "rawperf: -sysmon-slack:", err)
			os.Exit(1)
		}
	}
	o.deadline = time.Now().Add(o.timeout)
	var err error
	switch mode {
	case "stream-recv":
		err = streamRecv(&o)
	case "stream-send":
		err = streamSend(&o)
	case "pp-server":
		err = ppServer(&o)
	case "pp-client":
		err = ppClient(&o)
	default:
		err = fmt.Errorf("unknown mode %q: want stream-recv, stream-send, pp-server or pp-client", mode)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "rawperf:", err)
		os.Exit(1)
	}
}

func (o *options) check() error {
	host, _, err := net.SplitHostPort(o.addr)
	if err != nil {
		return fmt.Errorf("-addr %q: %w", o.addr, err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("-addr %q: a loopback address only", o.addr)
	}
	switch {
	case o.conns < 1 || o.conns > 1024:
		return fmt.Errorf("-conns %d: want 1 to 1024", o.conns)
	case o.depth < 1 || o.depth > 4096:
		return fmt.Errorf("-depth %d: want 1 to 4096", o.depth)
	case o.req < 1 || o.resp < 1 || o.req > 16<<20 || o.resp > 16<<20:
		return fmt.Errorf("-req %d / -resp %d: want 1 byte to 16 MiB", o.req, o.resp)
	case o.wsize < 1 || o.rsize < 1 || o.wsize > 64<<20 || o.rsize > 64<<20:
		return fmt.Errorf("-wsize %d / -rsize %d: want 1 byte to 64 MiB", o.wsize, o.rsize)
	case o.dur <= 0 || o.timeout <= 0 || o.warmup < 0:
		return errors.New("-dur and -timeout must be positive, -warmup not negative")
	}
	return nil
}

func dial(o *options) (net.Conn, error) {
	var err error
	for range 50 { // the server may still be starting: bounded retry
		var c net.Conn
		if c, err = net.Dial("tcp", o.addr); err == nil {
			c.SetDeadline(o.deadline)
			return c, nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return nil, fmt.Errorf("dial %s: %w", o.addr, err)
}

func listen(o *options) (*net.TCPListener, error) {
	ln, err := net.Listen("tcp", o.addr)
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	tl := ln.(*net.TCPListener)
	tl.SetDeadline(o.deadline)
	fmt.Println("listening", o.addr)
	return tl, nil
}

// streamRecv accepts one connection, reads until EOF, then writes the
// byte count back (8 bytes, big-endian) for the sender to report.
func streamRecv(o *options) error {
	ln, err := listen(o)
	if err != nil {
		return err
	}
	defer ln.Close()
	c, err := ln.Accept()
	if err != nil {
		return fmt.Errorf("accept: %w", err)
	}
	defer c.Close()
	c.SetDeadline(o.deadline)
	buf := make([]byte, o.rsize)
	var total uint64
	for {
		n, err := c.Read(buf)
		total += uint64(n)
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("read: %w", err)
		}
	}
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], total)
	_, err = c.Write(b[:])
	return err
}

func streamSend(o *options) error {
	c, err := dial(o)
	if err != nil {
		return err
	}
	defer c.Close()
	buf := make([]byte, o.wsize)
	for i := range buf {
		buf[i] = byte(i)
	}
	start := time.Now()
	end := start.Add(o.dur)
	for time.Now().Before(end) {
		if _, err := c.Write(buf); err != nil {
			return fmt.Errorf("write: %w", err)
		}
	}
	c.(*net.TCPConn).CloseWrite()
	var b [8]byte
	if _, err := io.ReadFull(c, b[:]); err != nil {
		return fmt.Errorf("reading the receiver's count: %w", err)
	}
	secs := time.Since(start).Seconds()
	got := binary.BigEndian.Uint64(b[:])
	fmt.Printf("RESULT mode=stream wsize=%d bytes=%d secs=%.3f bw_bytes_per_sec=%.0f Gbit_per_s=%.3f\n",
		o.wsize, got, secs, float64(got)/secs, float64(got)*8/secs/1e9)
	return nil
}

func ppServer(o *options) error {
	ln, err := listen(o)
	if err != nil {
		return err
	}
	defer ln.Close()
	var wg sync.WaitGroup
	for range o.conns {
		c, err := ln.Accept()
		if err != nil {
			return fmt.Errorf("accept: %w", err)
		}
		c.SetDeadline(o.deadline)
		wg.Add(1)
		go func() {
			defer wg.Done()
			serve(c, o)
		}()
	}
	wg.Wait()
	return nil
}

func serve(c net.Conn, o *options) {
	defer c.Close()
	br := bufio.NewReaderSize(c, 64<<10)
	bw := bufio.NewWriterSize(c, 256<<10)
	req := make([]byte, o.req)
	resp := make([]byte, o.resp)
	for i := range resp {
		resp[i] = byte(i)
	}
	for {
		if _, err := io.ReadFull(br, req); err != nil {
			bw.Flush()
			return
		}
		if _, err := bw.Write(resp); err != nil {
			return
		}
		if br.Buffered() < o.req {
			if err := bw.Flush(); err != nil {
				return
			}
		}
	}
}

func ppClient(o *options) error {
	counts := make([]atomic.Int64, o.conns)
	hists := make([]latency.Histogram, o.conns)
	var stop, measuring atomic.Bool
	var wg sync.WaitGroup
	errs := make(chan error, o.conns)
	for i := range o.conns {
		c, err := dial(o)
		if err != nil {
			stop.Store(true)
			wg.Wait()
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			if o.depth == 1 {
				errs <- syncLoop(c, o, &counts[i], &hists[i], &stop, &measuring)
			} else {
				errs <- pipelined(c, o, &counts[i], &stop)
			}
		}()
	}
	sum := func() (s int64) {
		for i := range counts {
			s += counts[i].Load()
		}
		return s
	}
	time.Sleep(o.warmup)
	measuring.Store(true)
	c0, t0 := sum(), time.Now()
	time.Sleep(o.dur)
	c1, t1 := sum(), time.Now()
	measuring.Store(false)
	stop.Store(true)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return err
		}
	}
	rps := float64(c1-c0) / t1.Sub(t0).Seconds()
	fmt.Printf("RESULT mode=pp conns=%d depth=%d req=%d resp=%d rps=%.0f resp_bytes_per_sec=%.0f avg_latency_us=%.2f",
		o.conns, o.depth, o.req, o.resp, rps, rps*float64(o.resp), float64(o.conns*o.depth)/rps*1e6)
	if o.depth == 1 {
		var all latency.Histogram
		for i := range hists {
			all.Add(&hists[i])
		}
		us := func(d time.Duration) float64 { return float64(d) / 1e3 }
		fmt.Printf(" p50_us=%.1f p99_us=%.1f p999_us=%.1f", us(all.Percentile(50)), us(all.Percentile(99)), us(all.Percentile(99.9)))
	}
	fmt.Println()
	return nil
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
}

func syncLoop(c net.Conn, o *options, n *atomic.Int64, h *latency.Histogram, stop, measuring *atomic.Bool) error {
	req := make([]byte, o.req)
	resp := make([]byte, o.resp)
	for !stop.Load() {
		t := time.Now()
		if _, err := c.Write(req); err != nil {
			return fmt.Errorf("write: %w", err)
		}
		if _, err := io.ReadFull(c, resp); err != nil {
			return fmt.Errorf("read: %w", err)
		}
		if measuring.Load() {
			h.Record(time.Since(t))
		}
		n.Add(1)
	}
	closeWrite(c)
	io.Copy(io.Discard, c)
	return nil
}

func pipelined(c net.Conn, o *options, n *atomic.Int64, stop *atomic.Bool) error {
	credits := make(chan struct{}, o.depth)
	for range o.depth {
		credits <- struct{}{}
	}
	werr := make(chan error, 1)
	go func() {
		bw := bufio.NewWriterSize(c, o.req*o.depth)
		req := make([]byte, o.req)
		for {
			select {
			case <-credits:
			default:
				if err := bw.Flush(); err != nil {
					werr <- err
					return
				}
				<-credits
			}
			if stop.Load() {
				break
			}
			if _, err := bw.Write(req); err != nil {
				werr <- err
				return
			}
		}
		werr <- bw.Flush()
		closeWrite(c)
	}()
	br := bufio.NewReaderSize(c, 256<<10)
	resp := make([]byte, o.resp)
	for {
		if _, err := io.ReadFull(br, resp); err != nil {
			if err == io.EOF {
				break
			}
			return fmt.Errorf("read: %w", err)
		}
		n.Add(1)
		credits <- struct{}{}
	}
	return <-werr
}
