package devtoken

import (
	"os"
	"testing"
)

// Two dev clusters side by side have a token file each; one stopping
// leaves the other's, and never removes a file another cluster rewrote.
func TestClustersSideBySideKeepTheirTokens(t *testing.T) {
	t.Setenv("XDG_RUNTIME_DIR", t.TempDir())
	first, err := Write(DefaultControlPlane, "first")
	if err != nil {
		t.Fatal(err)
	}
	second, err := Write("127.0.0.1:7170", "second")
	if err != nil {
		t.Fatal(err)
	}
	if first == second {
		t.Fatalf("both clusters write %s", first)
	}
	Remove(second, "second")
	if got, err := Read(DefaultControlPlane); err != nil || got != "first" {
		t.Fatalf("the first cluster's token after the second stopped: %q, %v", got, err)
	}
	if _, err := Read("127.0.0.1:7170"); err == nil {
		t.Fatal("the second cluster's token outlived it")
	}
	if _, err := Write(DefaultControlPlane, "again"); err != nil {
		t.Fatal(err)
	}
	Remove(first, "first") // the address was taken over: not ours to remove
	if _, err := os.Stat(first); err != nil {
		t.Fatalf("removed a token another cluster wrote: %v", err)
	}
}
