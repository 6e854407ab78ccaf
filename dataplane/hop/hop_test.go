package hop

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// Every internal header is named in hop.go alone, and every one of them is
// in Fields, the list the client listener strips: a header added
// elsewhere, or left off the list, would be one a client could send.
func TestInternalHeadersAreNamedOnceAndAllStripped(t *testing.T) {
	var outside []string
	var declared []string
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			v, _ := strconv.Unquote(lit.Value)
			if strings.HasPrefix(strings.ToLower(v), "x-shardcache-") {
				if filepath.Base(path) == "hop.go" && filepath.Base(filepath.Dir(path)) == "hop" {
					declared = append(declared, v)
				} else {
					outside = append(outside, path+": "+v)
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(outside) > 0 {
		t.Errorf("internal header names outside hop/hop.go: %v", outside)
	}
	if len(declared) == 0 {
		t.Fatal("no internal header found in hop.go")
	}
	for _, h := range declared {
		if h == Prefix {
			continue
		}
		if !slices.Contains(Fields, h) {
			t.Errorf("%s is not in Fields: clients could send it", h)
		}
		if !strings.HasPrefix(h, Prefix) {
			t.Errorf("%s does not start with %s: Strip would let a client send it", h, Prefix)
		}
	}
}

// Strip removes every internal field (in any case a client sends
// it, as net/http canonicalises it) and the fields drop names, and keeps
// the rest.
func TestStripInternal(t *testing.T) {
	h := http.Header{}
	for _, f := range Fields {
		h.Set(strings.ToLower(f), "x")
	}
	h.Set("X-Forwarded-Host", "evil.example")
	h.Set("Accept", "*/*")
	Strip(h, func(k string) bool { return k == "X-Forwarded-Host" })
	if len(h) != 1 || h.Get("Accept") != "*/*" {
		t.Fatalf("after Strip: %v; want Accept only", h)
	}
}
