package dataplane

import (
	"go/ast"
	"go/build"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The data plane's structure, as data, held against the code: which
// package may import which, and the order of the owner's stages, each of
// which calls only those after it.

const module = "github.com/shardcache/shardcache/dataplane"

// forbiddenImports: a package, and the packages of the data plane it must
// never import.
var forbiddenImports = map[string][]string{
	// The front decides trust and routes; the cache is the owner's.
	"front": {"store", "purge", "flight"},
	// The owner never calls the front back.
	"owner": {"front", "session"},
	// Leaves: rules and algorithms that import nothing of the path.
	"httpcache":         {"*"},
	"flight":            {"*"},
	"internal/sketch":   {"*"},
	"internal/reply":    {"*"},
	"internal/tasks":    {"*"},
	"internal/tracing":  {"*"},
	"internal/wait":     {"*"},
	"internal/coalesce": {"*"},
	"internal/notes":    {"*"},
	"internal/h1client": {"*"},
	"hop":               {"*except httpcache"},
}

// ownerStages are the owner's pipeline files in order. A function in one may call functions of the same file or
// of a later one, never of an earlier one.
var ownerStages = []string{"serve.go", "lookup.go", "decide.go", "collapse.go", "fetch.go", "admit.go", "answer.go"}

func TestPackagesImportOnlyWhatTheyMay(t *testing.T) {
	var dirs []string
	filepath.WalkDir(".", func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() && p != "." && !strings.Contains(p, "testdata") {
			dirs = append(dirs, p)
		}
		return nil
	})
	for _, dir := range dirs {
		pkg, err := build.ImportDir(dir, 0)
		if err != nil {
			continue // no Go files
		}
		for _, imp := range pkg.Imports {
			if imp == module {
				t.Errorf("%s imports the data plane's root package: parts never import what wires them", dir)
			}
		}
		rules, ok := forbiddenImports[filepath.ToSlash(dir)]
		if !ok {
			continue
		}
		for _, imp := range pkg.Imports {
			inner, isOurs := strings.CutPrefix(imp, module+"/")
			if !isOurs {
				continue
			}
			for _, rule := range rules {
				switch {
				case rule == "*", strings.HasPrefix(rule, "*except ") && !slices.Contains(strings.Fields(rule)[1:], inner):
					t.Errorf("%s is a leaf and imports %s", dir, inner)
				case rule == inner:
					t.Errorf("%s imports %s, which it must not", dir, inner)
				}
			}
		}
	}
}

func TestTheOwnersStagesCallOnlyForward(t *testing.T) {
	fs := token.NewFileSet()
	files := map[string]*ast.File{}
	defined := map[string]string{} // function or method name -> its stage file
	entries, err := os.ReadDir("owner")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fs, filepath.Join("owner", name), nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		files[name] = f
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || !slices.Contains(ownerStages, name) || !stageFunc(fd) {
				continue
			}
			{
				if prev, dup := defined[fd.Name.Name]; dup && prev != name {
					t.Fatalf("%s is defined in %s and %s: the check needs one", fd.Name.Name, prev, name)
				}
				defined[fd.Name.Name] = name
			}
		}
	}
	for _, stage := range ownerStages {
		f, ok := files[stage]
		if !ok {
			t.Errorf("stage %s is gone: update ownerStages and docs/architecture.md", stage)
			continue
		}
		at := slices.Index(ownerStages, stage)
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			var name string
			switch fn := call.Fun.(type) {
			case *ast.Ident:
				name = fn.Name
			case *ast.SelectorExpr:
				name = fn.Sel.Name
			}
			if callee, ok := defined[name]; ok && slices.Index(ownerStages, callee) < at {
				t.Errorf("%s calls %s of %s, an earlier stage: the owner's path must only go forward (%s)",
					stage, name, callee, fs.Position(call.Pos()))
			}
			return true
		})
	}
}

// stageFunc reports whether fd is one of the stages' own: a function, or a
// method of the owner, its serving value or a fill (a type's Close, say,
// is no stage's).
func stageFunc(fd *ast.FuncDecl) bool {
	if fd.Recv == nil || len(fd.Recv.List) == 0 {
		return true
	}
	t := fd.Recv.List[0].Type
	if st, ok := t.(*ast.StarExpr); ok {
		t = st.X
	}
	id, ok := t.(*ast.Ident)
	return ok && (id.Name == "Owner" || id.Name == "serving" || id.Name == "fill")
}
