package deploy

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestOverlaysRenderWithKubectlsKustomize renders every overlay with the
// kustomize kubectl 1.32 embeds (v5.5.0, built from
// internal/kustomize55, a module of its own) and, where kubectl is
// installed, with `kubectl kustomize`: each must give what the newer
// library the other tests use gives. kustomize v5.5.0 once panicked on the
// production overlay's multi-document deletion patch.
func TestOverlaysRenderWithKubectlsKustomize(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "kustomize55")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Dir = filepath.Join("internal", "kustomize55")
	build.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the kustomize v5.5.0 renderer: %v\n%s", err, out)
	}
	renderers := map[string]func(dir string) *exec.Cmd{
		"kustomize v5.5.0": func(dir string) *exec.Cmd { return exec.Command(bin, dir) },
	}
	if kubectl, err := exec.LookPath("kubectl"); err == nil {
		renderers["kubectl kustomize"] = func(dir string) *exec.Cmd { return exec.Command(kubectl, "kustomize", dir) }
	} else {
		t.Log("kubectl is not installed: rendering with the v5.5.0 library only")
	}
	for _, dir := range kustomizations {
		want := render(t, dir)
		for name, cmd := range renderers {
			var stderr bytes.Buffer
			c := cmd(dir)
			c.Stderr = &stderr
			got, err := c.Output()
			if err != nil {
				t.Errorf("%s %s: %v\n%.2000s", name, dir, err, stderr.String())
				continue
			}
			if g, w := docs(t, got), docs(t, want); !reflect.DeepEqual(g, w) {
				t.Errorf("%s renders %s otherwise: %d documents %v, want %d %v", name, dir, len(g), ids(g), len(w), ids(w))
			}
		}
	}
}

// docs decodes a multi-document YAML stream, sorted by kind and name.
func docs(t *testing.T, b []byte) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, d := range bytes.Split(b, []byte("\n---\n")) {
		var m map[string]any
		if err := yaml.Unmarshal(d, &m); err != nil {
			t.Fatal(err)
		}
		if m != nil {
			out = append(out, m)
		}
	}
	sort.Slice(out, func(i, j int) bool { return id(out[i]) < id(out[j]) })
	return out
}

func ids(ds []map[string]any) []string {
	var out []string
	for _, d := range ds {
		out = append(out, id(d))
	}
	return out
}

// id is a document's kind and name.
func id(d map[string]any) string {
	meta, _ := d["metadata"].(map[string]any)
	return fmt.Sprintf("%v/%v", d["kind"], meta["name"])
}
