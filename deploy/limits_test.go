package deploy

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// dataplaneConst reads a duration constant, `const name = N * time.Second`,
// from a dataplane source file.
func dataplaneConst(t *testing.T, file, name string) time.Duration {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "dataplane", file))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`const ` + name + `\s*=\s*(\d+)\s*\*\s*time\.(Second|Minute)\b`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("no `const %s = N * time.Second` in dataplane/%s", name, file)
	}
	n, _ := strconv.Atoi(string(m[1]))
	if string(m[2]) == "Minute" {
		return time.Duration(n) * time.Minute
	}
	return time.Duration(n) * time.Second
}

// checkNodeMemory: the node's heap stays under its container's memory
// limit. A full memory tier is a live heap of --memory and more, and at
// GOGC's default the heap grows to twice the live heap before the
// collector runs (README, "The collector"): a limit under twice --memory
// is an OOM kill once the tier fills. GOMEMLIMIT makes the collector run
// before the heap reaches the limit; it leaves a tenth of the limit to
// what is not Go's heap, and a quarter of --memory above the tier, so
// that the collector does not run all the time with the tier full.
func checkNodeMemory(t *testing.T, node workload, memoryFlag string) {
	t.Helper()
	c := node.template.Spec.Containers[0]
	memory, err := parseBytes(memoryFlag)
	if err != nil {
		t.Errorf("node: --memory=%s: %v", memoryFlag, err)
		return
	}
	limit := c.Resources.Limits.Memory().Value()
	if limit == 0 {
		t.Error("node: no memory limit")
		return
	}
	i := slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "GOMEMLIMIT" })
	if i < 0 {
		if limit < 2*memory+memory/4 {
			t.Errorf("node: memory limit %s is under twice --memory=%s and room, and no GOMEMLIMIT keeps the heap under it", c.Resources.Limits.Memory(), memoryFlag)
		}
		return
	}
	soft, err := parseBytes(c.Env[i].Value)
	if err != nil {
		t.Errorf("node: GOMEMLIMIT=%s: %v", c.Env[i].Value, err)
		return
	}
	if soft > limit-limit/10 {
		t.Errorf("node: GOMEMLIMIT=%s leaves less than a tenth of the memory limit %s to what is not the heap", c.Env[i].Value, c.Resources.Limits.Memory())
	}
	if soft < memory+memory/4 {
		t.Errorf("node: GOMEMLIMIT=%s is under --memory=%s and a quarter: the collector would run all the time with the tier full", c.Env[i].Value, memoryFlag)
	}
}

// parseBytes reads a size as --memory and GOMEMLIMIT write it: a number
// and B, KiB, MiB, GiB or TiB.
func parseBytes(s string) (int64, error) {
	for i, u := range []string{"TiB", "GiB", "MiB", "KiB", "B"} {
		if n, ok := strings.CutSuffix(s, u); ok {
			v, err := strconv.ParseInt(n, 10, 64)
			if err != nil {
				return 0, err
			}
			return v << (10 * (4 - i)), nil
		}
	}
	return strconv.ParseInt(s, 10, 64)
}

// checkEtcdCompaction: the bundled etcd compacts its history as the
// control plane's embedded one does (controlplane/etcd.go): nothing else
// compacts it, and member, status and purge records churn, so without it
// the backend grows until etcd's quota stops every write.
func checkEtcdCompaction(t *testing.T, etcd *appsv1.StatefulSet) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "controlplane", "etcd.go"))
	if err != nil {
		t.Fatal(err)
	}
	flags := map[string]string{}
	for _, a := range etcd.Spec.Template.Spec.Containers[0].Command {
		if name, value, ok := strings.Cut(strings.TrimPrefix(a, "--"), "="); ok {
			flags[name] = value
		}
	}
	for field, flag := range map[string]string{"AutoCompactionMode": "auto-compaction-mode", "AutoCompactionRetention": "auto-compaction-retention"} {
		m := regexp.MustCompile(`ec\.` + field + ` = "([^"]*)"`).FindSubmatch(b)
		if m == nil {
			t.Fatalf("controlplane/etcd.go sets no %s", field)
		}
		if flags[flag] != string(m[1]) {
			t.Errorf("StatefulSet/etcd: --%s=%q, want %q as the embedded etcd (controlplane/etcd.go)", flag, flags[flag], m[1])
		}
	}
}
