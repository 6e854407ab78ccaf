package main

import (
	"context"
	"fmt"
	"strconv"
	"syscall"
	"time"
)

// S6 kills one instance with SIGKILL (no drain, no goodbye) while S2's
// workload runs through the other two, as a load balancer would take a
// dead front out: what do clients see, and what does the origin pay?
var killScenario = scenario{
	id: "S6", title: "an instance killed (SIGKILL) under the S2 workload",
	workload: func(r *runner) string {
		return fmt.Sprintf("S2's workload: %d requests to warm, then %d through instances 1 and 2 while instance 3 is killed with SIGKILL "+
			"one second in; origin requests beyond the same run without the kill", s6Requests(r), s6Requests(r))
	},
	metrics: []string{"client errors", "origin requests caused"},
	run:     runS6,
}

func s6Requests(r *runner) int {
	if r.quick {
		return 15000
	}
	return 60000
}

// killable are the systems S6 measures: one process an instance.
var killable = map[string]bool{"shardcache": true, "nginx two-tier": true}

func runS6(ctx context.Context, r *runner) ([]measurement, error) {
	var out []measurement
	n := strconv.Itoa(s6Requests(r))
	for _, sys := range systems {
		if !killable[sys.name] {
			continue
		}
		fmt.Fprintf(r.log, "   %s\n", sys.name)
		// run warms the system, then measures the origin requests and the
		// client errors of the second run, killing instance 3 during it
		// when kill is set.
		run := func(kill bool) (origin, errors int64, err error) {
			err = withSystem(ctx, r, sys, s2Memory, func(in *instance) error {
				if _, err := r.load(ctx, in.targets, "--dist", "zipf:1.0", "--keys", "100000", "--size", "16KiB", "-c", "16",
					"-n", n, "-d", "0", "--seed", "42"); err != nil {
					return err
				}
				o0, err := r.originRequests()
				if err != nil {
					return err
				}
				type result struct {
					res *loadResult
					err error
				}
				done := make(chan result, 1)
				go func() {
					res, err := r.load(ctx, in.targets[:2], "--dist", "zipf:1.0", "--keys", "100000", "--size", "16KiB", "-c", "16",
						"-n", n, "-d", "0", "--seed", "43")
					done <- result{res, err}
				}()
				if kill {
					select {
					case <-time.After(time.Second): // a second into the run
					case res := <-done:
						done <- res
					}
					victim := in.serving[2]
					for _, pid := range tree(victim.cmd.Process.Pid) {
						_ = syscall.Kill(pid, syscall.SIGKILL)
					}
				}
				res := <-done
				if res.err != nil {
					return res.err
				}
				o1, err := r.originRequests()
				if err != nil {
					return err
				}
				origin, errors = o1-o0, sumErrors(res.res)
				return nil
			})
			return origin, errors, err
		}
		base, _, err := run(false)
		if err != nil {
			return nil, err
		}
		killed, errs, err := run(true)
		if err != nil {
			return nil, err
		}
		out = append(out, measurement{System: sys.name, ClientErrors: errs, OriginReqs: max(killed-base, 0), Runs: 1,
			Note: fmt.Sprintf("origin requests in the measured run: %d with the kill, %d without", killed, base)})
	}
	return out, nil
}
