package main

import (
	"bufio"
	"context"
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The soak: a three-node shardcache cluster under the heaviest load the
// machine gives, for a long time, sampled every interval. It proves the
// cluster keeps serving without errors and without growing: memory, file
// descriptors and goroutines must stay flat once warm.
const (
	soakInterval = 10 * time.Second
	soakKeys     = 20000
	soakMemory   = 128 << 20
)

// soakSample is one interval's figures.
type soakSample struct {
	At         time.Duration // since the start
	ReqPerSec  float64
	P99        float64 // ms
	Errors     int64
	RSSMiB     float64 // the three nodes together
	FDs        int     // the three nodes together
	Goroutines int     // the three nodes together
}

func runSoak(ctx context.Context, r *runner, d time.Duration, out string) error {
	var samples []soakSample
	sys := systems[slices.IndexFunc(systems, func(s system) bool { return s.name == "shardcache" })]
	err := withSystem(ctx, r, sys, soakMemory, func(in *instance) error {
		start := time.Now()
		for i := 0; time.Since(start) < d; i++ {
			res, err := r.load(ctx, in.targets, "--dist", "zipf:1.1", "--keys", strconv.Itoa(soakKeys), "--size", "4KiB",
				"-c", "32", "-d", soakInterval.String(), "--seed", strconv.Itoa(i))
			if err != nil {
				return err
			}
			s := soakSample{At: time.Since(start), ReqPerSec: res.PerSecond, P99: res.LatencyMs.P99}
			for _, n := range res.Errors {
				s.Errors += n
			}
			for i, p := range in.serving {
				s.RSSMiB += float64(rssBytes([]*proc{p}, "VmRSS")) / (1 << 20)
				s.FDs += openFDs(p.cmd.Process.Pid)
				g, err := goroutines("http://" + in.ops[i] + "/metrics")
				if err != nil {
					return err
				}
				s.Goroutines += g
			}
			samples = append(samples, s)
			fmt.Fprintf(r.log, "   %6s  %8.0f req/s  p99 %6.2f ms  errors %d  RSS %6.1f MiB  fds %4d  goroutines %4d\n",
				s.At.Round(time.Second), s.ReqPerSec, s.P99, s.Errors, s.RSSMiB, s.FDs, s.Goroutines)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	verdict := soakVerdict(samples)
	name := "soak-" + time.Now().UTC().Format("2006-01-02")
	if err := soakChart(samples, filepath.Join(out, name+".png")); err != nil {
		return err
	}
	if err := soakReport(samples, d, verdict, filepath.Join(out, name+".md"), name+".png"); err != nil {
		return err
	}
	fmt.Fprintf(r.log, "wrote %s.md and .png\n", filepath.Join(out, name))
	if len(verdict) > 0 {
		return fmt.Errorf("soak: %s", strings.Join(verdict, "; "))
	}
	return nil
}

// soakVerdict lists what the soak found wrong: errors, or memory, file
// descriptors or goroutines growing between the first warm minute and the
// last.
func soakVerdict(s []soakSample) []string {
	var bad []string
	var errs int64
	for _, x := range s {
		errs += x.Errors
	}
	if errs > 0 {
		bad = append(bad, fmt.Sprintf("%d client errors", errs))
	}
	per := int(time.Minute / soakInterval)
	if len(s) < 3*per {
		return append(bad, fmt.Sprintf("only %d samples: too short to judge growth", len(s)))
	}
	avg := func(xs []soakSample, f func(soakSample) float64) float64 {
		var t float64
		for _, x := range xs {
			t += f(x)
		}
		return t / float64(len(xs))
	}
	warm, last := s[per:2*per], s[len(s)-per:]
	for _, m := range []struct {
		name  string
		f     func(soakSample) float64
		slack float64
	}{
		{"RSS MiB", func(x soakSample) float64 { return x.RSSMiB }, 0.10},
		{"file descriptors", func(x soakSample) float64 { return float64(x.FDs) }, 0.10},
		{"goroutines", func(x soakSample) float64 { return float64(x.Goroutines) }, 0.10},
	} {
		w, l := avg(warm, m.f), avg(last, m.f)
		if l > w*(1+m.slack)+8 {
			bad = append(bad, fmt.Sprintf("%s grew from %.0f (second minute) to %.0f (last minute)", m.name, w, l))
		}
	}
	return bad
}

func soakReport(s []soakSample, d time.Duration, verdict []string, path, chart string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "# shardcache soak, %s\n\n", time.Now().UTC().Format("2006-01-02 15:04 UTC"))
	fmt.Fprintf(&b, "Three nodes and a control plane on this machine (2 shared cores, load generator on the same machine), "+
		"%s of `cachectl bench` at 32 connections: Zipf s=1.1 over %d keys × 4 KiB, %s memory per node; "+
		"sampled every %s (req/s and p99 of the interval; RSS, open file descriptors and goroutines of the three nodes together). "+
		"`make soak` runs it.\n\n", d, soakKeys, mib(soakMemory), soakInterval)
	if len(verdict) == 0 {
		b.WriteString("**Verdict: no client error; memory, file descriptors and goroutines flat (last minute within 10 % of the second).**\n\n")
	} else {
		b.WriteString("**Verdict: " + strings.Join(verdict, "; ") + ".**\n\n")
	}
	b.WriteString("![soak](" + chart + ")\n\n| time | req/s | p99 ms | errors | RSS MiB | fds | goroutines |\n|---:|---:|---:|---:|---:|---:|---:|\n")
	for i, x := range s {
		if i%int(time.Minute/soakInterval) != 0 && i != len(s)-1 {
			continue // one row a minute
		}
		fmt.Fprintf(&b, "| %s | %.0f | %.2f | %d | %.1f | %d | %d |\n", x.At.Round(time.Second), x.ReqPerSec, x.P99, x.Errors, x.RSSMiB, x.FDs, x.Goroutines)
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// soakChart draws each figure over time in a panel of its own.
func soakChart(s []soakSample, path string) error {
	panels := []struct {
		name string
		f    func(soakSample) float64
	}{
		{"req/s", func(x soakSample) float64 { return x.ReqPerSec }},
		{"p99 ms", func(x soakSample) float64 { return x.P99 }},
		{"RSS MiB (3 nodes)", func(x soakSample) float64 { return x.RSSMiB }},
		{"open fds (3 nodes)", func(x soakSample) float64 { return float64(x.FDs) }},
		{"goroutines (3 nodes)", func(x soakSample) float64 { return float64(x.Goroutines) }},
	}
	const w, ph, gap, left = 1000, 130, 30, 70
	h := len(panels)*(ph+gap) + gap
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	draw.Draw(img, img.Bounds(), image.White, image.Point{}, draw.Src)
	text := func(x, y int, str string, c color.Color) { drawText(img, x, y, str, c) }
	for pi, p := range panels {
		top := gap + pi*(ph+gap)
		hi := 0.0
		for _, x := range s {
			hi = math.Max(hi, p.f(x))
		}
		hi = math.Max(hi*1.1, 1)
		text(left, top-8, p.name+fmt.Sprintf(" (0 to %.0f)", hi), color.Black)
		for x := left; x < w-10; x++ {
			img.Set(x, top+ph, color.Gray{0x99})
		}
		for y := top; y <= top+ph; y++ {
			img.Set(left, y, color.Gray{0x99})
		}
		text(5, top+ph+4, "0", color.Gray{0x55})
		text(5, top+10, fmt.Sprintf("%.0f", hi), color.Gray{0x55})
		var px, py int
		for i, x := range s {
			cx := left + 2 + i*(w-left-20)/max(len(s)-1, 1)
			cy := top + ph - int(p.f(x)/hi*float64(ph))
			if i > 0 {
				line(img, px, py, cx, cy, palette[pi%len(palette)])
			}
			px, py = cx, cy
		}
	}
	if len(s) > 0 {
		text(w-200, h-8, fmt.Sprintf("time: 0 to %s", s[len(s)-1].At.Round(time.Second)), color.Black)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return png.Encode(f, img)
}

// line draws a straight line, two pixels thick.
func line(img *image.RGBA, x0, y0, x1, y1 int, c color.Color) {
	steps := max(abs(x1-x0), abs(y1-y0), 1)
	for i := 0; i <= steps; i++ {
		x := x0 + (x1-x0)*i/steps
		y := y0 + (y1-y0)*i/steps
		img.Set(x, y, c)
		img.Set(x, y+1, c)
	}
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

// openFDs counts a process's open file descriptors.
func openFDs(pid int) int {
	entries, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	return len(entries)
}

// goroutines reads go_goroutines from a node's /metrics.
func goroutines(url string) (int, error) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "go_goroutines "); ok {
			f, err := strconv.ParseFloat(v, 64)
			return int(f), err
		}
	}
	return 0, fmt.Errorf("%s has no go_goroutines", url)
}
