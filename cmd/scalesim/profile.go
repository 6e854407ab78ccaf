package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime/pprof"
	"time"
)

// profilePhase takes CPU profiles of the control plane (from its ops
// listener, with the admin token) and of this process (the simulated
// nodes) over the same d, written to dir as control.pprof and sim.pprof.
// It returns at once; wait for both to be written.
func (s *sim) profilePhase(ctx context.Context, dir string, d time.Duration) (wait func() error) {
	errs := make(chan error, 2)
	go func() {
		errs <- s.controlProfile(ctx, filepath.Join(dir, "control.pprof"), d)
	}()
	go func() {
		errs <- ownProfile(ctx, filepath.Join(dir, "sim.pprof"), d)
	}()
	return func() error { return errors.Join(<-errs, <-errs) }
}

func (s *sim) controlProfile(ctx context.Context, path string, d time.Duration) error {
	url := fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", s.ops, int(d.Seconds()))
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer scale-token")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("control plane profile: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("control plane profile: %s", resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return fmt.Errorf("control plane profile: %w", err)
	}
	return f.Close()
}

func ownProfile(ctx context.Context, path string, d time.Duration) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return fmt.Errorf("simulator profile (is -cpuprofile set too?): %w", err)
	}
	select {
	case <-time.After(d):
	case <-ctx.Done():
	}
	pprof.StopCPUProfile()
	return f.Close()
}
