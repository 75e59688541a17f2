//go:build verbs

package main

import (
	"context"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/rdisk/rdisk/rdma"
	"github.com/rdisk/rdisk/rdma/verbs"
)

func main() {
	addr := flag.String("addr", "", "the target's host:port")
	pdHex := flag.String("pd", "", "connect request private data (hex)")
	sendHex := flag.String("send", "", "once accepted, a Send of these bytes (hex)")
	wait := flag.Duration("wait", 3*time.Second, "how long to wait for the target's answer to the Send")
	flag.Parse()
	if err := run(*addr, *pdHex, *sendHex, *wait); err != nil {
		fmt.Printf("BADCM: ERROR %v\n", err)
		os.Exit(1)
	}
}

func unhex(s string) ([]byte, error) {
	return hex.DecodeString(strings.ReplaceAll(s, " ", ""))
}

func run(addr, pdHex, sendHex string, wait time.Duration) error {
	pd, err := unhex(pdHex)
	if err != nil {
		return fmt.Errorf("-pd: %v", err)
	}
	msg, err := unhex(sendHex)
	if err != nil {
		return fmt.Errorf("-send: %v", err)
	}
	p, err := verbs.New(verbs.Config{})
	if err != nil {
		return err
	}
	defer p.Close()
	pdom, err := p.AllocPD()
	if err != nil {
		return err
	}
	defer pdom.Close()
	scq, err := p.CreateCQ(64)
	if err != nil {
		return err
	}
	defer scq.Close()
	rcq, err := p.CreateCQ(64)
	if err != nil {
		return err
	}
	defer rcq.Close()
	qp, err := pdom.CreateQP(rdma.QPConfig{SendCQ: scq, RecvCQ: rcq, MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1})
	if err != nil {
		return err
	}
	defer qp.Close()
	buf := make([]byte, 8*9000+len(msg))
	mr, err := pdom.RegisterMemory(buf, rdma.AccessLocalWrite)
	if err != nil {
		return err
	}
	defer mr.Deregister()
	for i := 0; i < 8; i++ {
		if err := qp.PostRecv(&rdma.RecvWR{ID: uint64(i), SGL: []rdma.SGE{{MR: mr, Offset: i * 9000, Length: 9000}}}); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	reply, err := qp.Connect(ctx, addr, rdma.ConnParam{PrivateData: pd, ResponderResources: 4, InitiatorDepth: 4})
	var re *rdma.RejectError
	if errors.As(err, &re) {
		fmt.Printf("BADCM: REJECTED pd=%x\n", re.PrivateData)
		return nil
	}
	if err != nil {
		return err
	}
	fmt.Printf("BADCM: ACCEPTED reply=%x\n", reply)
	if len(msg) == 0 {
		return nil
	}
	copy(buf[8*9000:], msg)
	if err := qp.PostSend(&rdma.SendWR{ID: 100, Op: rdma.OpSend, Flags: rdma.Signaled, SGL: []rdma.SGE{{MR: mr, Offset: 8 * 9000, Length: len(msg)}}}); err != nil {
		return err
	}
	deadline := time.Now().Add(wait)
	var wc [1]rdma.WC
	for time.Now().Before(deadline) {
		for rcq.Poll(wc[:]) == 1 {
			if wc[0].Status != rdma.StatusSuccess {
				fmt.Printf("BADCM: CLOSED err=receive %s\n", wc[0].Status)
				return nil
			}
			n := min(wc[0].ByteLen, 64)
			off := int(wc[0].ID) * 9000
			fmt.Printf("BADCM: RECV len=%d data=%x\n", wc[0].ByteLen, buf[off:off+n])
		}
		for scq.Poll(wc[:]) == 1 {
			if wc[0].Status != rdma.StatusSuccess {
				fmt.Printf("BADCM: CLOSED err=send %s\n", wc[0].Status)
				return nil
			}
		}
		select {
		case <-qp.Done():
			// Drain what came before the end.
			for rcq.Poll(wc[:]) == 1 {
				if wc[0].Status == rdma.StatusSuccess {
					off := int(wc[0].ID) * 9000
					fmt.Printf("BADCM: RECV len=%d data=%x\n", wc[0].ByteLen, buf[off:off+min(wc[0].ByteLen, 64)])
				}
			}
			fmt.Printf("BADCM: CLOSED err=%v\n", qp.Err())
			return nil
		case <-time.After(20 * time.Millisecond):
		}
	}
	fmt.Printf("BADCM: OPEN after %v\n", wait)
	return nil
}
