// Package devtoken locates the admin token file that `shardcache dev`
// writes and cachectl reads, so the dev cluster needs no token typed by hand.
// Each dev cluster has a file of its own, named by its control plane's
// address, so that two clusters side by side (--port-offset) keep theirs.
package devtoken

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// DefaultControlPlane is the dev cluster's control-plane address without
// a port offset; its token file is plain dev-token.
const DefaultControlPlane = "127.0.0.1:7070"

// Path is the dev token file of the cluster whose control plane is at
// control: $XDG_RUNTIME_DIR/shardcache/dev-token when set, else
// shardcache/dev-token under the user's config directory; another address
// than the default adds it to the name (dev-token-127.0.0.1_7170).
func Path(control string) (string, error) {
	base := os.Getenv("XDG_RUNTIME_DIR")
	if base == "" {
		var err error
		if base, err = os.UserConfigDir(); err != nil {
			return "", fmt.Errorf("locating the dev token file: %w", err)
		}
	}
	name := "dev-token"
	if control != DefaultControlPlane {
		name += "-" + strings.NewReplacer(":", "_", "/", "_", "[", "", "]", "").Replace(control)
	}
	return filepath.Join(base, "shardcache", name), nil
}

// Write stores token in the dev token file of control, readable by the
// user only.
func Write(control, token string) (string, error) {
	p, err := Path(control)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return "", fmt.Errorf("writing dev token: %w", err)
	}
	if err := os.WriteFile(p, []byte(token+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("writing dev token: %w", err)
	}
	return p, nil
}

// Remove deletes the file at path if it still holds token: a cluster that
// took the address over since keeps its own.
func Remove(path, token string) {
	if b, err := os.ReadFile(path); err == nil && bytes.Equal(bytes.TrimSpace(b), []byte(token)) {
		os.Remove(path)
	}
}

// Read returns the token in the dev token file of control; the error says
// where it looked when there is none.
func Read(control string) (string, error) {
	p, err := Path(control)
	if err != nil {
		return "", err
	}
	b, err := os.ReadFile(p)
	if errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("no admin token: give --token or SHARDCACHE_TOKEN, or start `shardcache dev` (it writes %s)", p)
	}
	if err != nil {
		return "", fmt.Errorf("reading dev token: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}
