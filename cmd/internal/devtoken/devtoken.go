// Package devtoken locates the admin token file that `shardcache dev`
// writes and cachectl reads, so the dev cluster needs no token typed by hand.
package devtoken

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Path is the dev token file: $XDG_RUNTIME_DIR/shardcache/dev-token when set,
// else shardcache/dev-token under the user's config directory.
func Path() (string, error) {
	base := os.Getenv("XDG_RUNTIME_DIR")
	if base == "" {
		var err error
		if base, err = os.UserConfigDir(); err != nil {
			return "", fmt.Errorf("locating the dev token file: %w", err)
		}
	}
	return filepath.Join(base, "shardcache", "dev-token"), nil
}

// Write stores token in the dev token file, readable by the user only.
func Write(token string) (string, error) {
	p, err := Path()
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

// Read returns the token in the dev token file; the error says where it
// looked when there is none.
func Read() (string, error) {
	p, err := Path()
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
