package main

import (
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

type scenarioResult struct {
	ID, Title, Workload string
	Metrics             []string
	Rows                []measurement
}

type report struct {
	Date      time.Time
	Quick     bool
	Wrk       bool // wrk drove the timed S1 runs
	PeerTLS   bool // shardcache's peer hop over mutual TLS
	Scenarios []scenarioResult
}

// columns give each metric column its figure and how it is printed.
var columns = map[string]struct {
	get    func(measurement) float64
	format string
}{
	"req/s":                       {func(m measurement) float64 { return m.ReqPerSec }, "%.0f"},
	"p50 ms":                      {func(m measurement) float64 { return m.P50 }, "%.2f"},
	"p99 ms":                      {func(m measurement) float64 { return m.P99 }, "%.2f"},
	"CPU µs/req":                  {func(m measurement) float64 { return m.CPUPerReqUs }, "%.0f"},
	"core wait µs/req":            {func(m measurement) float64 { return m.WaitPerReqUs }, "%.0f"},
	"hit ratio":                   {func(m measurement) float64 { return m.HitRatio }, "%.3f"},
	"origin offload":              {func(m measurement) float64 { return m.Offload }, "%.3f"},
	"origin requests":             {func(m measurement) float64 { return float64(m.OriginReqs) }, "%.0f"},
	"origin requests caused":      {func(m measurement) float64 { return float64(m.OriginReqs) }, "%.0f"},
	"MB/s":                        {func(m measurement) float64 { return m.MBPerSec }, "%.0f"},
	"RSS growth MiB":              {func(m measurement) float64 { return m.RSSGrowthMiB }, "%.0f"},
	"objects/node":                {func(m measurement) float64 { return m.ObjsPerNode }, "%.0f"},
	"ideal bound":                 {func(m measurement) float64 { return m.IdealBound }, "%.3f"},
	"client errors":               {func(m measurement) float64 { return float64(m.ClientErrors) }, "%.0f"},
	"relay fraction":              {func(m measurement) float64 { return m.RelayFraction }, "%.3f"},
	"relay fraction, hottest 1 %": {func(m measurement) float64 { return m.HotRelayFraction }, "%.3f"},
	"p50 local ms":                {func(m measurement) float64 { return m.P50Local }, "%.3f"},
	"p50 relayed ms":              {func(m measurement) float64 { return m.P50Relayed }, "%.3f"},
	"p99 local ms":                {func(m measurement) float64 { return m.P99Local }, "%.3f"},
	"p99 relayed ms":              {func(m measurement) float64 { return m.P99Relayed }, "%.3f"},
	"connections per 10k relayed": {func(m measurement) float64 { return m.ConnsPer10k }, "%.2f"},
}

// value returns a row's figure for a metric column and its printed form;
// NaN and "n/a" where the row has none (a negative count).
func value(m measurement, metric string) (float64, string) {
	c, ok := columns[metric]
	if !ok {
		return math.NaN(), "?"
	}
	v := c.get(m)
	if v < 0 {
		return math.NaN(), "n/a"
	}
	return v, fmt.Sprintf(c.format, v)
}

func (r *report) write(out string) error {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	name := r.Date.Format("2006-01-02")
	if r.Quick {
		name += "-quick"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# shardcache benchmark, %s\n\n", r.Date.Format("2006-01-02 15:04 UTC"))
	if r.Quick {
		b.WriteString("**Quick run: shortened workloads, for trying the harness; not figures to quote.**\n\n")
	}
	host, _ := os.Hostname()
	gen := "the load generator (`cachectl bench`) shares the CPU with the systems"
	if r.Wrk {
		gen = "S1's timed runs are driven by wrk (C, one thread per front, cheap beside the servers), the rest by `cachectl bench`, " +
			"which shares the CPU with the systems"
	}
	fmt.Fprintf(&b, "One machine (%s), everything on 127.0.0.1; %s. "+
		"Each system is started, measured and stopped in turn against the same demo origin. "+
		"A ratio is the system's figure over shardcache's in the same run. CPU µs/req is the user+system time of the serving processes "+
		"(nodes; nginx master and workers; varnishd and its child) over the requests served; core wait µs/req is the time their threads "+
		"were runnable but not running, waiting for a core (each thread's schedstat), over the same requests. "+
		"Every nginx instance runs one worker process, and every shardcache node and the net/http ceiling one P (GOMAXPROCS=1); "+
		"varnishd keeps its default thread pools. %s\n\n", host, gen, hopNote(r.PeerTLS))
	b.WriteString("Reproduce with `make bench` (about 10 minutes; installs nginx, varnish and wrk from Debian's packages when missing).\n\n")
	b.WriteString("![ratios to shardcache](" + name + ".png)\n\n")
	for _, sc := range r.Scenarios {
		fmt.Fprintf(&b, "## %s: %s\n\n%s.\n\n", sc.ID, sc.Title, sc.Workload)
		b.WriteString("| system |")
		for _, m := range sc.Metrics {
			fmt.Fprintf(&b, " %s | ratio |", m)
		}
		b.WriteString(" notes |\n|---|")
		for range sc.Metrics {
			b.WriteString("---:|---:|")
		}
		b.WriteString("---|\n")
		base := sc.Rows[0]
		for _, row := range sc.Rows {
			fmt.Fprintf(&b, "| %s |", row.System)
			for _, m := range sc.Metrics {
				v, s := value(row, m)
				bv, _ := value(base, m)
				fmt.Fprintf(&b, " %s | %s |", s, ratio(v, bv))
			}
			note := row.Note
			if row.Errors > 0 {
				note = strings.TrimSpace(note + fmt.Sprintf(" %d errors", row.Errors))
			}
			if row.Runs > 1 {
				note = strings.TrimSpace(note + fmt.Sprintf(" median of %d runs", row.Runs))
			}
			fmt.Fprintf(&b, " %s |\n", note)
		}
		b.WriteString("\n")
	}
	md := filepath.Join(out, name+".md")
	if err := os.WriteFile(md, []byte(b.String()), 0o644); err != nil {
		return err
	}
	if err := r.chart(filepath.Join(out, name+".png")); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "wrote %s and its chart\n", md)
	return nil
}

func ratio(v, base float64) string {
	if math.IsNaN(v) || math.IsNaN(base) || base == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f", v/base)
}

// headline is the metric each scenario's bars show.
// S5 compares shardcache with itself and has no bar group.
var headline = map[string]string{"S1": "req/s", "S2": "origin requests", "S3": "MB/s", "S4": "origin requests caused"}

var palette = []color.RGBA{{0x1f, 0x77, 0xb4, 255}, {0xff, 0x7f, 0x0e, 255}, {0x2c, 0xa0, 0x2c, 255}, {0xd6, 0x27, 0x28, 255}, {0x94, 0x67, 0xbd, 255}}

// chart draws, per scenario, each system's headline figure as a ratio to
// shardcache's (1.0, the dashed line).
func (r *report) chart(path string) error {
	var charted []scenarioResult
	for _, sc := range r.Scenarios {
		if headline[sc.ID] != "" {
			charted = append(charted, sc)
		}
	}
	const w, h, top, bottom, left = 1000, 420, 40, 90, 50
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	draw.Draw(img, img.Bounds(), image.White, image.Point{}, draw.Src)
	text := func(x, y int, s string, c color.Color) { drawText(img, x, y, s, c) }
	maxRatio := 1.0
	for _, sc := range charted {
		bv, _ := value(sc.Rows[0], headline[sc.ID])
		for _, row := range sc.Rows {
			v, _ := value(row, headline[sc.ID])
			if !math.IsNaN(v) && bv > 0 {
				maxRatio = math.Max(maxRatio, v/bv)
			}
		}
	}
	maxRatio = math.Ceil(maxRatio*2) / 2
	plotH := h - top - bottom
	y := func(ratio float64) int { return top + plotH - int(ratio/maxRatio*float64(plotH)) }
	text(10, 20, "Each system's figure / shardcache's (S1 req/s, S2 origin requests, S3 MB/s, S4 origin requests caused)", color.Black)
	for t := 0.0; t <= maxRatio+1e-9; t += 0.5 {
		for x := left; x < w-10; x += 2 {
			img.Set(x, y(t), color.Gray{0xdd})
		}
		text(10, y(t)+4, fmt.Sprintf("%.1f", t), color.Gray{0x55})
	}
	for x := left; x < w-10; x += 6 {
		img.Set(x, y(1), color.Black)
		img.Set(x+1, y(1), color.Black)
	}
	if len(charted) == 0 {
		return nil
	}
	groupW := (w - left - 20) / len(charted)
	names := map[string]int{}
	for si, sc := range charted {
		x0 := left + si*groupW + 10
		barW := (groupW - 20) / max(len(sc.Rows), 1)
		bv, _ := value(sc.Rows[0], headline[sc.ID])
		for ri, row := range sc.Rows {
			if _, ok := names[row.System]; !ok {
				names[row.System] = len(names)
			}
			c := palette[names[row.System]%len(palette)]
			v, _ := value(row, headline[sc.ID])
			if math.IsNaN(v) || bv <= 0 {
				text(x0+ri*barW+2, y(0)-4, "n/a", color.Gray{0x77})
				continue
			}
			rect := image.Rect(x0+ri*barW+2, y(v/bv), x0+(ri+1)*barW-2, y(0))
			draw.Draw(img, rect, image.NewUniform(c), image.Point{}, draw.Src)
			text(rect.Min.X, rect.Min.Y-3, fmt.Sprintf("%.2f", v/bv), color.Black)
		}
		text(x0, h-bottom+16, sc.ID+" "+headline[sc.ID], color.Black)
	}
	lx := left
	ordered := make([]string, len(names))
	for name, i := range names {
		ordered[i] = name
	}
	for i, name := range ordered {
		c := palette[i%len(palette)]
		draw.Draw(img, image.Rect(lx, h-40, lx+12, h-28), image.NewUniform(c), image.Point{}, draw.Src)
		text(lx+16, h-29, name, color.Black)
		lx += 20 + 7*len(name) + 20
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return png.Encode(f, img)
}

// drawText writes s on img with its baseline at (x, y).
func drawText(img draw.Image, x, y int, s string, c color.Color) {
	(&font.Drawer{Dst: img, Src: image.NewUniform(c), Face: basicfont.Face7x13, Dot: fixed.P(x, y)}).DrawString(s)
}

// hopNote says how shardcache's nodes reached each other in the run.
func hopNote(peerTLS bool) string {
	if peerTLS {
		return "shardcache's peer hop is mutual TLS with certificates from the control plane's CA, as deploy/ runs it " +
			"(keep-alive HTTP/1.1, HTTP/2 past 64 connections a peer)."
	}
	return "shardcache's peer hop is h2c on loopback (-peer-tls=false)."
}
