package deploy

import (
	"bufio"
	"bytes"
	"context"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// dockerInstructions returns a Dockerfile's instructions, continuation
// lines joined, comments dropped: instruction name and arguments.
func dockerInstructions(t *testing.T, path string) [][2]string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out [][2]string
	var cur strings.Builder
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "#") || (line == "" && cur.Len() == 0) {
			continue
		}
		if l, ok := strings.CutSuffix(line, `\`); ok {
			cur.WriteString(l + " ")
			continue
		}
		cur.WriteString(line)
		name, args, _ := strings.Cut(strings.TrimSpace(cur.String()), " ")
		out = append(out, [2]string{strings.ToUpper(name), strings.TrimSpace(args)})
		cur.Reset()
	}
	return out
}

// TestDeployDockerfiles checks the Dockerfiles against the repository
// (the build context is its root): the files they copy exist, the build
// is the one build-rootfs.sh repeats, and the entrypoint is the target's.
func TestDeployDockerfiles(t *testing.T) {
	t.Parallel()
	const entry = `["/rdisk", "target", "--config", "/etc/rdisk/target.json"]`
	for name, want := range map[string][]string{
		"Dockerfile":       {"CGO_ENABLED=0 go build -trimpath", "gcr.io/distroless/static"},
		"Dockerfile.verbs": {"CGO_ENABLED=1 go build -tags verbs -trimpath", "libibverbs1", "librdmacm1", "-slim"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ins := dockerInstructions(t, filepath.Join("docker", name))
			var from []string
			var entrypoint string
			all := ""
			for _, in := range ins {
				all += in[0] + " " + in[1] + "\n"
				switch in[0] {
				case "FROM":
					from = append(from, in[1])
				case "ENTRYPOINT":
					entrypoint = in[1]
				case "COPY":
					if strings.Contains(in[1], "--from=") {
						continue
					}
					f := strings.Fields(in[1])
					for _, src := range f[:len(f)-1] {
						if strings.HasPrefix(src, "--") || src == "." {
							continue
						}
						if _, err := os.Stat(filepath.Join("..", src)); err != nil {
							t.Errorf("COPY %s: not in the repository: %v", src, err)
						}
					}
				case "RUN":
					// cp of a repository file in the build stage.
					f := strings.Fields(in[1])
					for i, w := range f {
						if w == "cp" && i+1 < len(f) && strings.HasPrefix(f[i+1], "deploy/") {
							if _, err := os.Stat(filepath.Join("..", f[i+1])); err != nil {
								t.Errorf("RUN cp %s: not in the repository: %v", f[i+1], err)
							}
						}
					}
				}
			}
			if len(from) < 2 || !strings.HasSuffix(from[0], " AS build") {
				t.Errorf("FROM %q: want a build stage (AS build) and a runtime stage", from)
			}
			if entrypoint != entry {
				t.Errorf("ENTRYPOINT %s, want %s", entrypoint, entry)
			}
			for _, w := range want {
				if !strings.Contains(all, w) {
					t.Errorf("no %q", w)
				}
			}
			if _, err := os.Stat(filepath.Join("docker", name+".dockerignore")); err != nil {
				t.Errorf("no %s.dockerignore: the build context would carry .git: %v", name, err)
			}
		})
	}
	// build-rootfs.sh builds as the Dockerfile does.
	script, err := os.ReadFile("docker/build-rootfs.sh")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(script), "CGO_ENABLED=0 go build -trimpath -buildvcs=false -ldflags='-s -w'") ||
		!strings.Contains(strings.Join(dockerLines(t), "\n"), "CGO_ENABLED=0 go build -trimpath -buildvcs=false -ldflags='-s -w'") {
		t.Error("build-rootfs.sh and the Dockerfile do not build rdisk the same way")
	}
}

func dockerLines(t *testing.T) []string {
	var out []string
	for _, in := range dockerInstructions(t, "docker/Dockerfile") {
		out = append(out, in[1])
	}
	return out
}

// TestDeployBuildRootfs runs docker/build-rootfs.sh: the image's tree
// built without a container engine, then its target started on loopback
// and probed (admin socket, NVMe/TCP discovery, iSCSI SendTargets) and
// stopped by SIGTERM, all by the script, which must exit 0. Then the tree
// is checked: a static binary (it runs on distroless/static or scratch),
// config/all.json as /etc/rdisk/target.json, /var/lib/rdisk empty, nothing
// of the smoke test left.
func TestDeployBuildRootfs(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("go is not on PATH: build-rootfs.sh cannot build rdisk")
	}
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	if testing.Short() {
		t.Skip("-short: build-rootfs.sh builds rdisk")
	}
	root := filepath.Join(t.TempDir(), "rootfs")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, sh, "docker/build-rootfs.sh", root)
	cmd.Env = append(os.Environ(), "TMPDIR="+t.TempDir())
	cmd.WaitDelay = 5 * time.Second
	start := time.Now()
	out, err := cmd.CombinedOutput()
	t.Logf("build-rootfs.sh (%v):\n%s", time.Since(start).Round(time.Millisecond), out)
	if err != nil {
		t.Fatalf("build-rootfs.sh: %v", err)
	}
	if !bytes.Contains(out, []byte("build-rootfs: ok: ")) {
		t.Fatal("build-rootfs.sh exited 0 without its final ok")
	}

	f, err := elf.Open(filepath.Join(root, "rdisk"))
	if err != nil {
		t.Fatalf("rootfs /rdisk: %v", err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("rootfs /rdisk has an ELF interpreter: not static, it would not run on distroless/static")
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Errorf("rootfs /rdisk links %v", libs)
	}

	got, err := os.ReadFile(filepath.Join(root, "etc/rdisk/target.json"))
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile("config/all.json")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Error("rootfs /etc/rdisk/target.json is not config/all.json")
	}
	if ents, err := os.ReadDir(filepath.Join(root, "var/lib/rdisk")); err != nil || len(ents) > 0 {
		t.Errorf("rootfs /var/lib/rdisk: %v, want an empty directory (%v)", ents, err)
	}
	ents, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if want := []string{"etc", "rdisk", "run", "tmp", "var"}; !slices.Equal(names, want) {
		t.Errorf("rootfs holds %v, want %v", names, want)
	}
}
