package libiscsi

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rdisk/rdisk/backstore"
	"github.com/rdisk/rdisk/iser"
	"github.com/rdisk/rdisk/iser/target"
	"github.com/rdisk/rdisk/scsi"
)

const iqn = "iqn.2026-11.io.rdisk:libiscsi"

// families are the suites of issue 5's acceptance list and those the
// hardening issue's item 4 made pass, run in this order. iSCSI families
// that this libiscsi does not have (1.19 lacks iSCSISendTargets, iSCSINop
// and iSCSICHAP) are reported and skipped; CHAP logins are checked
// separately below.
var families = []string{
	// First, on a zeroed LU: MultipathIO.CompareAndWrite zeroes blocks
	// 0-255 and then compares blocks 0-256 with zeroes (libiscsi 1.19's
	// off-by-one); in --test=ALL's order block 256 is zero when it runs.
	"SCSI.MultipathIO",
	"SCSI.TestUnitReady", "SCSI.Inquiry", "SCSI.ReadCapacity10", "SCSI.ReadCapacity16",
	"SCSI.Read6", "SCSI.Read10", "SCSI.Read12", "SCSI.Read16",
	"SCSI.Write10", "SCSI.Write12", "SCSI.Write16",
	"SCSI.WriteVerify10", "SCSI.WriteVerify12", "SCSI.WriteVerify16",
	"SCSI.Verify10", "SCSI.Verify12", "SCSI.Verify16",
	"SCSI.WriteSame10", "SCSI.WriteSame16", "SCSI.Unmap", "SCSI.GetLBAStatus",
	"SCSI.CompareAndWrite", "SCSI.OrWrite", "SCSI.Prefetch10", "SCSI.Prefetch16",
	"SCSI.ModeSense6", "SCSI.ReportSupportedOpcodes", "SCSI.Reserve6",
	"SCSI.PrinReadKeys", "SCSI.PrinServiceactionRange",
	"SCSI.ProutRegister", "SCSI.ProutReserve", "SCSI.ProutClear", "SCSI.ProutPreempt",
	"SCSI.StartStopUnit", "SCSI.PreventAllow", "SCSI.NoMedia", "SCSI.Mandatory",
	"iSCSI.iSCSIcmdsn", "iSCSI.iSCSIdatasn", "iSCSI.iSCSIResiduals", "iSCSI.iSCSITMF",
	"iSCSI.iSCSISendTargets", "iSCSI.iSCSINop", "iSCSI.iSCSICHAP",
	// Hardening issue, item 4 (a few seconds together).
	"SCSI.ExtendedCopy", "SCSI.ReceiveCopyResults", "SCSI.WriteAtomic16",
	"SCSI.ReadDefectData10", "SCSI.ReadDefectData12", "SCSI.ReadOnly",
}

// knownFailures are failures caused outside the transport, tracked until
// fixed; a test listed here that passes fails this test, so the list stays
// honest.
var knownFailures = map[string]string{}

type result struct {
	suite, test string
	outcome     string // passed, failed, skipped
	detail      string
}

// elsewhere are the tests run against another LU than LUN 0 (each LUN's
// tests are one iscsi-test-cu run):
//   - LUN 1, one logical block per physical block: GetLBAStatus.UnmapSingle
//     asks for the status at LBA i+1 and wants a descriptor starting at
//     i+LBPPB, which only LBPPB 1 allows (SBC-4 5.8.2: the first descriptor
//     contains the starting LBA; libiscsi 1.19 and its master);
//   - LUN 2, read-only: ReadOnly.ReadOnlySBC checks that every write
//     command is refused (it skips on a writable LU).
var elsewhere = map[string]uint64{
	"GetLBAStatus.UnmapSingle": 1,
	"ReadOnly.ReadOnlySBC":     2,
}

// TestISCSITestCU runs the acceptance families (RDISK_LIBISCSI_ALL=1: the
// whole suite, --test=ALL) against a target with two
// portals, so that the MultipathIO tests have two paths to LUN 0.
func TestISCSITestCU(t *testing.T) {
	bin, err := exec.LookPath("iscsi-test-cu")
	if err != nil {
		t.Skip("iscsi-test-cu not installed (Debian package libiscsi-bin)")
	}
	url := os.Getenv("RDISK_LIBISCSI_URL")
	peer := url != ""
	all := os.Getenv("RDISK_LIBISCSI_ALL") != ""
	avail, list := listTests(t, bin)
	roots := []string{"ALL"}
	if !all {
		roots = nil
		for _, f := range families {
			if avail[f] {
				roots = append(roots, f)
			} else {
				t.Logf("%s: not in this libiscsi (skipped)", f)
			}
		}
	}
	perLUN := map[uint64][]string{}
	for _, root := range roots {
		for lun, names := range expand(list, root) {
			if peer {
				lun = 0
			}
			perLUN[lun] = append(perLUN[lun], names...)
		}
	}
	var urls func(lun uint64) []string
	if peer {
		urls = func(uint64) []string { return []string{url} }
	} else {
		portals := startTarget(t, nil, 2)
		urls = func(lun uint64) []string {
			var u []string
			for i, p := range portals {
				if i == 0 || lun == 0 {
					u = append(u, fmt.Sprintf("iscsi://%s/%s/%d", p, iqn, lun))
				}
			}
			return u
		}
	}
	var res []result
	luns := make([]uint64, 0, len(perLUN))
	for lun := range perLUN {
		luns = append(luns, lun)
	}
	slices.Sort(luns)
	for _, lun := range luns {
		out := runCU(t, bin, urls(lun), perLUN[lun])
		r := parse(out)
		if len(r) == 0 {
			t.Fatalf("no test results in the output of LUN %d:\n%s", lun, out)
		}
		res = append(res, r...)
	}
	type count struct{ pass, fail, skip int }
	per := map[string]*count{}
	var order []string
	var unexpected []string
	for _, r := range res {
		c := per[r.suite]
		if c == nil {
			c = &count{}
			per[r.suite] = c
			order = append(order, r.suite)
		}
		name := r.suite + "." + r.test
		switch r.outcome {
		case "passed":
			c.pass++
			if why, ok := knownFailures[name]; ok {
				unexpected = append(unexpected, fmt.Sprintf("%s passes now: drop it from knownFailures (%s)", name, why))
			}
		case "skipped":
			c.skip++
		default:
			c.fail++
			if why, ok := knownFailures[name]; ok {
				t.Logf("known failure %s: %s", name, why)
				continue
			}
			unexpected = append(unexpected, fmt.Sprintf("%s failed:\n%s", name, r.detail))
		}
	}
	slices.Sort(order)
	var tot count
	for _, s := range order {
		c := per[s]
		t.Logf("%-28s pass %3d  fail %2d  skip %2d", s, c.pass, c.fail, c.skip)
		tot.pass, tot.fail, tot.skip = tot.pass+c.pass, tot.fail+c.fail, tot.skip+c.skip
	}
	t.Logf("%d passed, %d failed, %d skipped", tot.pass, tot.fail, tot.skip)
	if peer {
		t.Logf("RDISK_LIBISCSI_URL=%s: counts only, failures not checked", url)
		return
	}
	want := 0
	for _, names := range perLUN {
		for _, n := range names {
			want += numTests(list, n)
		}
	}
	if len(res) != want {
		t.Errorf("%d results for %d tests: iscsi-test-cu stopped early", len(res), want)
	}
	for _, u := range unexpected {
		t.Error(u)
	}
}

// expand returns the test patterns of root ("ALL", "SCSI.Read10") per LUN:
// root's suites, except that a suite holding a test of another LU is split
// into its tests; in the order iscsi-test-cu lists them.
func expand(list []string, root string) map[uint64][]string {
	out := map[uint64][]string{}
	suites := []string{root}
	if strings.Count(root, ".") == 0 { // a family: its suites
		suites = nil
		for _, name := range list {
			if strings.HasPrefix(name, root+".") && strings.Count(name, ".") == 1 {
				suites = append(suites, name)
			}
		}
	}
	for _, suite := range suites {
		split := false
		for st := range elsewhere {
			split = split || strings.HasPrefix(st, suiteTest(suite)+".")
		}
		if !split {
			out[0] = append(out[0], suite)
			continue
		}
		for _, name := range list {
			if strings.HasPrefix(name, suite+".") && strings.Count(name, ".") == 2 {
				lun := elsewhere[suiteTest(name)]
				out[lun] = append(out[lun], name)
			}
		}
	}
	return out
}

// suiteTest strips the family: "ALL.Read10.Simple" is "Read10.Simple".
func suiteTest(name string) string {
	_, st, _ := strings.Cut(name, ".")
	return st
}

// TestISCSITestCUCHAP logs in with CHAP through libiscsi's URL syntax.
func TestISCSITestCUCHAP(t *testing.T) {
	bin, err := exec.LookPath("iscsi-test-cu")
	if err != nil {
		t.Skip("iscsi-test-cu not installed (Debian package libiscsi-bin)")
	}
	addr := startTarget(t, &iser.CHAPSecret{User: "rdisk", Secret: "libiscsi-secret"}, 1)[0]
	out := runCU(t, bin, []string{"iscsi://rdisk%libiscsi-secret@" + addr + "/" + iqn + "/0"}, []string{"SCSI.TestUnitReady"})
	res := parse(out)
	if len(res) != 1 || res[0].outcome != "passed" {
		t.Fatalf("TestUnitReady with CHAP: %+v\n%s", res, out)
	}
	out = runCU(t, bin, []string{"iscsi://rdisk%wrong-secret-123@" + addr + "/" + iqn + "/0"}, []string{"SCSI.TestUnitReady"})
	if res := parse(out); len(res) == 1 && res[0].outcome == "passed" {
		t.Fatalf("TestUnitReady with a wrong CHAP secret passed:\n%s", out)
	}
}

// The LUs under test: LUN 0 has 512-byte logical blocks in 4 KiB physical
// blocks (LBPPB 8, for the WRITE SAME and COMPARE AND WRITE tests that
// need LBPPB > 1) and WRITE ATOMIC(16) up to 1 MiB (the RAM disk writes
// atomically under the LU's range lock); LUN 1 has LBPPB 1 and LUN 2 is
// read-only (see elsewhere).
var luns = []struct {
	lun  uint64
	size int64
	cfg  scsi.LUConfig
}{
	{0, 128 << 20, scsi.LUConfig{PhysicalBlockExp: 3, AtomicTransferBlocks: 2048}},
	{1, 32 << 20, scsi.LUConfig{}},
	{2, 8 << 20, scsi.LUConfig{ReadOnly: true}},
}

// startTarget serves one target with the LUs above on n portals and
// returns their addresses.
func startTarget(t *testing.T, chap *iser.CHAPSecret, n int) []string {
	var lcs []target.LUNConfig
	for _, l := range luns {
		disk, err := backstore.NewMem(l.size, 512)
		if err != nil {
			t.Fatal(err)
		}
		lcs = append(lcs, target.LUNConfig{LUN: l.lun, Disk: disk, LU: l.cfg})
	}
	tg, err := target.New(target.Config{Targets: []target.TargetConfig{{Name: iqn, CHAP: chap, LUNs: lcs}}})
	if err != nil {
		t.Fatal(err)
	}
	var addrs []string
	done := make(chan error, n)
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addrs = append(addrs, ln.Addr().String())
		go func() { done <- tg.Serve(context.Background(), ln) }()
	}
	t.Cleanup(func() {
		tg.Close()
		for range n {
			<-done
		}
	})
	return addrs
}

// listTests returns the families, suites and tests iscsi-test-cu knows,
// as a set and in its order.
func listTests(t *testing.T, bin string) (map[string]bool, []string) {
	out, err := exec.Command(bin, "--list").Output()
	if err != nil && len(out) == 0 {
		t.Fatalf("iscsi-test-cu --list: %v", err)
	}
	m := map[string]bool{}
	var list []string
	for _, l := range strings.Split(string(out), "\n") {
		if l = strings.TrimSpace(l); l != "" && !m[l] {
			m[l] = true
			list = append(list, l)
		}
	}
	return m, list
}

// numTests is the number of tests a pattern (a suite or a test) names.
func numTests(list []string, pattern string) int {
	if strings.Count(pattern, ".") == 2 {
		return 1
	}
	n := 0
	for _, name := range list {
		if strings.HasPrefix(name, pattern+".") && strings.Count(name, ".") == 2 {
			n++
		}
	}
	return n
}

// runCU runs tests (patterns) with iscsi-test-cu against urls (several:
// the paths of a multipath LU). iscsi-test-cu adds the patterns of --test
// from the last one back, so they are passed in reverse to run in order.
func runCU(t *testing.T, bin string, urls, tests []string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	rev := slices.Clone(tests)
	slices.Reverse(rev)
	cmd := exec.CommandContext(ctx, bin, append([]string{"-d", "--test=" + strings.Join(rev, ",")}, urls...)...)
	cmd.Dir = t.TempDir() // CUnit may write result files
	cmd.WaitDelay = 5 * time.Second
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	start := time.Now()
	err := cmd.Run()
	t.Logf("iscsi-test-cu %s: %d patterns in %v", urls[0], len(tests), time.Since(start).Round(time.Millisecond))
	if ctx.Err() != nil {
		t.Fatalf("iscsi-test-cu timed out:\n%s", buf.String())
	}
	if err != nil {
		t.Logf("iscsi-test-cu: %v", err)
	}
	if os.Getenv("RDISK_LIBISCSI_LOG") != "" {
		t.Logf("iscsi-test-cu output:\n%s", buf.String())
	}
	return buf.String()
}

var (
	suiteRE = regexp.MustCompile(`^Suite: (\S+)`)
	testRE  = regexp.MustCompile(`^  Test: (\S+) \.\.\.`)
)

// parse reads CUnit's verbose output: "Suite: X", then for each test
// "  Test: Y ...", libiscsi's messages, and a line starting with "passed" or
// "FAILED" (the failed assertions follow it). libiscsi prints "[SKIPPED]"
// in a test that did not run what it tests; CUnit counts it as passed.
func parse(out string) []result {
	var res []result
	var cur *result
	suite := ""
	finish := func() {
		if cur != nil {
			if cur.outcome == "" {
				cur.outcome = "failed" // no verdict: the suite died
			}
			res = append(res, *cur)
			cur = nil
		}
	}
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	skipped := false
	for sc.Scan() {
		line := sc.Text()
		if m := suiteRE.FindStringSubmatch(line); m != nil {
			finish()
			suite = m[1]
			continue
		}
		if strings.HasPrefix(line, "Run Summary:") {
			finish()
			continue
		}
		if m := testRE.FindStringSubmatch(line); m != nil {
			finish()
			cur = &result{suite: suite, test: m[1]}
			skipped = false
			line = line[len(m[0]):]
		}
		if cur == nil {
			continue
		}
		if cur.outcome != "" {
			if cur.outcome == "failed" {
				cur.detail += line + "\n"
			}
			continue
		}
		trim := strings.TrimLeft(line, " \t")
		switch {
		case strings.HasPrefix(trim, "passed"):
			cur.outcome = "passed"
			if skipped {
				cur.outcome = "skipped"
			}
		case strings.HasPrefix(trim, "FAILED"):
			cur.outcome = "failed"
		default:
			if strings.Contains(line, "[SKIPPED]") {
				skipped = true
			}
			cur.detail += line + "\n"
		}
	}
	finish()
	return res
}
