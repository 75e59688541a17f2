package iser

import "testing"

func TestSerialArithmetic(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		a, b uint32
		less bool
	}{
		{0, 1, true},
		{1, 0, false},
		{5, 5, false},
		{0xffffffff, 0, true}, // wraps
		{0, 0xffffffff, false},
		{0x7ffffffe, 0xfffffffd, true},
		{0, 0x80000000, false}, // exactly 2^31 apart: undefined
		{0x80000000, 0, false},
		{0xfffffff0, 0x10, true},
	} {
		if got := SNLess(tc.a, tc.b); got != tc.less {
			t.Errorf("SNLess(%#x, %#x) = %v, want %v", tc.a, tc.b, got, tc.less)
		}
		if got := SNGreater(tc.b, tc.a); got != tc.less {
			t.Errorf("SNGreater(%#x, %#x) = %v, want %v", tc.b, tc.a, got, tc.less)
		}
	}
	if !SNLessEq(3, 3) || !SNGreaterEq(3, 3) || !SNInRange(0, 0xfffffffe, 2) || SNInRange(3, 0xfffffffe, 2) {
		t.Error("SNLessEq/SNGreaterEq/SNInRange")
	}
}

func TestCmdWindow(t *testing.T) {
	t.Parallel()
	w := NewCmdWindow(0xfffffffe, 4) // wraps: 0xfffffffe .. 1
	if w.MaxCmdSN != 1 || w.Depth() != 4 {
		t.Fatalf("window %+v depth %d", w, w.Depth())
	}
	for _, tc := range []struct {
		sn   uint32
		want CmdSNCheck
	}{
		{0xfffffffe, CmdSNInWindow}, {0xffffffff, CmdSNInWindow}, {0, CmdSNInWindow}, {1, CmdSNInWindow},
		{2, CmdSNOutOfWindow}, {0xfffffffd, CmdSNDuplicate}, {0x7ffffff0, CmdSNOutOfWindow},
	} {
		if got := w.Check(tc.sn); got != tc.want {
			t.Errorf("Check(%#x) = %v, want %v", tc.sn, got, tc.want)
		}
	}
	for i := 0; i < 4; i++ {
		w.Advance()
	}
	if w.Depth() != 0 || w.Check(2) != CmdSNOutOfWindow || w.Check(1) != CmdSNDuplicate {
		t.Errorf("closed window %+v depth %d", w, w.Depth())
	}
	w.Credit(2)
	if w.Depth() != 2 || w.Check(3) != CmdSNInWindow {
		t.Errorf("after credit %+v", w)
	}
	if NewCmdWindow(5, 0).Depth() != 0 || CmdSNCheck(9).String() != "invalid" {
		t.Error("zero window / String")
	}

	iw := InitiatorWindow{CmdSN: 10, ExpCmdSN: 10, MaxCmdSN: 10}
	if !iw.CanSend() || iw.Next() != 10 || iw.CanSend() {
		t.Errorf("initiator window %+v", iw)
	}
	iw.Update(11, 20)
	if iw.ExpCmdSN != 11 || iw.MaxCmdSN != 20 || !iw.CanSend() {
		t.Errorf("after update %+v", iw)
	}
	iw.Update(9, 15) // stale: never moves back
	iw.Update(30, 5) // MaxCmdSN < ExpCmdSN-1: ignored
	if iw.ExpCmdSN != 11 || iw.MaxCmdSN != 20 {
		t.Errorf("stale updates applied: %+v", iw)
	}
}
