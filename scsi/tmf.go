package scsi

import (
	"context"
	"strconv"
)

// TMF is a SAM-5 task management function.
type TMF uint8

// Task management functions.
const (
	TMFAbortTask       TMF = iota + 1 // abort one task of the nexus
	TMFAbortTaskSet                   // abort the nexus's tasks on the LU
	TMFClearACA                       // not supported (no NormACA)
	TMFClearTaskSet                   // abort every task on the LU
	TMFLUNReset                       // clear the task set and reset the LU
	TMFTargetWarmReset                // reset every LU of the target
	TMFTargetColdReset                // same as a warm reset here
	TMFITNexusReset                   // abort the nexus's tasks everywhere, release its SPC-2 reservations
	TMFQueryTask                      // does the task exist?
	TMFQueryTaskSet                   // does the nexus have tasks on the LU?
	TMFQueryAsyncEvent                // not supported
)

// String returns the SAM name of the function.
func (f TMF) String() string {
	switch f {
	case TMFAbortTask:
		return "ABORT TASK"
	case TMFAbortTaskSet:
		return "ABORT TASK SET"
	case TMFClearACA:
		return "CLEAR ACA"
	case TMFClearTaskSet:
		return "CLEAR TASK SET"
	case TMFLUNReset:
		return "LOGICAL UNIT RESET"
	case TMFTargetWarmReset:
		return "TARGET WARM RESET"
	case TMFTargetColdReset:
		return "TARGET COLD RESET"
	case TMFITNexusReset:
		return "I_T NEXUS RESET"
	case TMFQueryTask:
		return "QUERY TASK"
	case TMFQueryTaskSet:
		return "QUERY TASK SET"
	case TMFQueryAsyncEvent:
		return "QUERY ASYNCHRONOUS EVENT"
	}
	return "tmf(" + strconv.Itoa(int(f)) + ")"
}

// TMFResponse is the outcome of a task management function. Transports map
// it to their response codes (iSCSI: Complete 0, TaskNotFound 1,
// IncorrectLUN 2, Rejected 5, Failed 255; SRP: the TMR response codes).
type TMFResponse uint8

// Task management responses.
const (
	TMFComplete     TMFResponse = iota // FUNCTION COMPLETE
	TMFSucceeded                       // FUNCTION SUCCEEDED (a queried task exists)
	TMFTaskNotFound                    // ABORT TASK named no task in the task set
	TMFIncorrectLUN                    // the LUN is not mapped
	TMFRejected                        // the function is not supported
	TMFFailed                          // ctx ended before the aborted tasks did
)

// String names the response.
func (r TMFResponse) String() string {
	switch r {
	case TMFComplete:
		return "FUNCTION COMPLETE"
	case TMFSucceeded:
		return "FUNCTION SUCCEEDED"
	case TMFTaskNotFound:
		return "TASK DOES NOT EXIST"
	case TMFIncorrectLUN:
		return "INCORRECT LOGICAL UNIT NUMBER"
	case TMFRejected:
		return "FUNCTION REJECTED"
	case TMFFailed:
		return "SERVICE DELIVERY OR TARGET FAILURE"
	}
	return "tmf response(" + strconv.Itoa(int(r)) + ")"
}

// TaskManagement performs a task management function for the session's
// I_T nexus on LUN lun (ignored by the target-wide functions); tag names
// the task for ABORT TASK and QUERY TASK.
//
// Functions that abort tasks mark them and return only when every aborted
// command has returned from Execute (or ctx is done: TMFFailed), so the
// transport can send the TMF response after the aborted commands' own
// completions. It must therefore not be called from a goroutine whose
// progress those commands need. Aborted commands of this nexus complete with
// Command.Aborted set (send no response); those of other nexuses with TASK
// ABORTED status. A command that is not in the task set yet (its Execute
// has not started) is not affected: a transport that has not yet passed a
// command to Execute must drop it itself.
//
// LOGICAL UNIT RESET and the target resets also release SPC-2 reservations,
// clear PREVENT ALLOW MEDIUM REMOVAL, restore the default mode parameters
// and establish a unit attention (BUS DEVICE RESET FUNCTION OCCURRED after a
// LUN reset, POWER ON, RESET, OR BUS DEVICE RESET OCCURRED after a target
// reset) for every nexus; persistent reservations survive. I_T NEXUS RESET
// does what an I_T nexus loss does and establishes I_T NEXUS LOSS OCCURRED
// for this nexus.
//
// With a LUNView, lun is a mapped LUN (an unmapped one is TMFIncorrectLUN)
// and the target resets reset the LUs the view shows only.
func (s *Session) TaskManagement(ctx context.Context, fn TMF, lun uint64, tag uint64) TMFResponse {
	if s.closed.Load() {
		return TMFFailed
	}
	t := s.t
	switch fn {
	case TMFTargetWarmReset, TMFTargetColdReset:
		// The LUs the session sees (its LUNView's, when it has one).
		for _, e := range s.luns() {
			if r := e.lu.resetLU(ctx, s, uaPowerOn); r != TMFComplete {
				return r
			}
		}
		return TMFComplete
	case TMFITNexusReset:
		for _, e := range *t.luns.Load() {
			lu := e.lu
			lu.nexusLoss(s)
			if !lu.tasks.waitAborted(ctx, func(c *Command) bool { return c.sess == s }) {
				return TMFFailed
			}
			lu.establishUAFor(func(x *Session) bool { return x == s }, uaNexusLoss)
		}
		return TMFComplete
	case TMFClearACA, TMFQueryAsyncEvent:
		return TMFRejected
	}
	e := s.lookup(lun)
	if e == nil {
		return TMFIncorrectLUN
	}
	lu := e.lu
	mine := func(c *Command) bool { return c.sess == s }
	silentOrStatus := func(c *Command) uint32 {
		if c.sess == s {
			return abortSilent
		}
		return abortStatus
	}
	switch fn {
	case TMFAbortTask:
		match := func(c *Command) bool { return c.sess == s && c.Tag == tag }
		if lu.tasks.abort(match, silentOrStatus) == 0 {
			return TMFTaskNotFound
		}
		if !lu.tasks.waitAborted(ctx, match) {
			return TMFFailed
		}
	case TMFAbortTaskSet:
		lu.tasks.abort(mine, silentOrStatus)
		if !lu.tasks.waitAborted(ctx, mine) {
			return TMFFailed
		}
	case TMFClearTaskSet:
		all := func(*Command) bool { return true }
		lu.tasks.abort(all, silentOrStatus)
		if !lu.tasks.waitAborted(ctx, all) {
			return TMFFailed
		}
	case TMFLUNReset:
		return lu.resetLU(ctx, s, uaLUNReset)
	case TMFQueryTask:
		if lu.tasks.find(func(c *Command) bool { return c.sess == s && c.Tag == tag }) {
			return TMFSucceeded
		}
	case TMFQueryTaskSet:
		if lu.tasks.find(mine) {
			return TMFSucceeded
		}
	default:
		return TMFRejected
	}
	return TMFComplete
}

// resetLU performs a logical unit reset on behalf of session s: every task
// is aborted, SPC-2 reservations and medium removal prevention are
// released, mode parameters return to their defaults and unit attention ua
// is established for every nexus.
func (lu *LU) resetLU(ctx context.Context, s *Session, ua uint32) TMFResponse {
	all := func(*Command) bool { return true }
	lu.tasks.abort(all, func(c *Command) uint32 {
		if c.sess == s {
			return abortSilent
		}
		return abortStatus
	})
	if !lu.tasks.waitAborted(ctx, all) {
		return TMFFailed
	}
	p := &lu.pr
	p.mu.Lock()
	p.spc2 = false
	p.update()
	lu.mode.Store(lu.defaultMode())
	p.mu.Unlock()
	lu.mu.Lock()
	for _, it := range lu.itls {
		it.prevent.Store(false)
		it.ua.Or(ua)
	}
	lu.mu.Unlock()
	return TMFComplete
}
