// Command benchplot draws the performance plots for make bench from the JSON
// the benchmarks write: the module call cost by guest language
// (BenchmarkCallRatios, -call) and the state store against volume count
// (BenchmarkScale, one -scale file per count).
//
//	go run ./cmd/benchplot -call bin/bench/call.json -scale 'bin/bench/scale-*.json' -out ../..
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"image/color"
	"os"
	"path/filepath"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

type side struct {
	Name  string    `json:"name"`
	Means []float64 `json:"mean_ns"`
	P50s  []float64 `json:"p50_ns"`
}

func main() {
	call := flag.String("call", "", "BenchmarkCallRatios JSON (VOLHOST_RATIOS_JSON)")
	scale := flag.String("scale", "", "glob of BenchmarkScale JSON files (VOLHOST_SCALE_JSON)")
	out := flag.String("out", ".", "directory for BENCHMARKS-call.png and BENCHMARKS-scale.png")
	flag.Parse()
	if *call == "" && *scale == "" {
		fmt.Fprintln(os.Stderr, "benchplot: give -call and/or -scale")
		os.Exit(2)
	}
	if *call != "" {
		if err := plotCall(*call, filepath.Join(*out, "BENCHMARKS-call.png")); err != nil {
			fmt.Fprintln(os.Stderr, "benchplot:", err)
			os.Exit(1)
		}
	}
	if *scale != "" {
		if err := plotScale(*scale, filepath.Join(*out, "BENCHMARKS-scale.png")); err != nil {
			fmt.Fprintln(os.Stderr, "benchplot:", err)
			os.Exit(1)
		}
	}
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// plotCall: median per-call time by side, mean and p50, log scale.
func plotCall(path, png string) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var sides []side
	if err := json.Unmarshal(raw, &sides); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if len(sides) == 0 {
		return fmt.Errorf("%s: no sides", path)
	}
	p := plot.New()
	p.Title.Text = "One 8-claim policy call by side (median of interleaved rounds)"
	p.Y.Label.Text = "µs per call (log)"
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	names := make([]string, len(sides))
	means, p50s := make(plotter.XYs, len(sides)), make(plotter.XYs, len(sides))
	for i, s := range sides {
		names[i] = s.Name
		means[i] = plotter.XY{X: float64(i), Y: median(s.Means) / 1000}
		p50s[i] = plotter.XY{X: float64(i), Y: median(s.P50s) / 1000}
	}
	// Points, not bars: a bar starts at 0, which a log axis cannot show.
	for _, series := range []struct {
		name  string
		v     plotter.XYs
		c     color.Color
		shape draw.GlyphDrawer
	}{{"mean", means, color.RGBA{R: 66, G: 133, B: 244, A: 255}, draw.CircleGlyph{}},
		{"p50", p50s, color.RGBA{R: 52, G: 168, B: 83, A: 255}, draw.TriangleGlyph{}}} {
		pts, err := plotter.NewScatter(series.v)
		if err != nil {
			return err
		}
		pts.Color, pts.Shape, pts.Radius = series.c, series.shape, vg.Points(5)
		p.Add(pts)
		p.Legend.Add(series.name, pts)
	}
	p.Legend.Top = true
	p.NominalX(names...)
	return save(png, 10*vg.Inch, 5*vg.Inch, p)
}

// plotScale: RSS and heap, and snapshot save/restore, against volumes.
func plotScale(glob, png string) error {
	files, err := filepath.Glob(glob)
	if err != nil || len(files) == 0 {
		return fmt.Errorf("%s: no scale results (%v)", glob, err)
	}
	var rows []map[string]float64
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		var r map[string]float64
		if err := json.Unmarshal(raw, &r); err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		rows = append(rows, r)
	}
	slices.SortFunc(rows, func(a, b map[string]float64) int { return int(a["volumes"] - b["volumes"]) })
	line := func(p *plot.Plot, key, label string, c color.Color) error {
		xys := make(plotter.XYs, len(rows))
		for i, r := range rows {
			xys[i] = plotter.XY{X: r["volumes"], Y: r[key]}
		}
		l, pts, err := plotter.NewLinePoints(xys)
		if err != nil {
			return err
		}
		l.Color, pts.Color = c, c
		p.Add(l, pts)
		p.Legend.Add(label, l)
		return nil
	}
	blue, red, green, orange := color.RGBA{R: 66, G: 133, B: 244, A: 255}, color.RGBA{R: 234, G: 67, B: 53, A: 255},
		color.RGBA{R: 52, G: 168, B: 83, A: 255}, color.RGBA{R: 251, G: 140, B: 0, A: 255}
	gray := color.RGBA{R: 90, G: 90, B: 90, A: 255}
	mem := plot.New()
	mem.Title.Text = "Memory against volume count"
	mem.X.Label.Text, mem.Y.Label.Text = "volumes (log)", "MiB"
	mem.X.Scale, mem.X.Tick.Marker = plot.LogScale{}, plot.LogTicks{Prec: -1}
	times := plot.New()
	times.Title.Text = "Time against volume count"
	times.X.Label.Text, times.Y.Label.Text = "volumes (log)", "s"
	times.X.Scale, times.X.Tick.Marker = plot.LogScale{}, plot.LogTicks{Prec: -1}
	type series struct {
		p          *plot.Plot
		key, label string
		c          color.Color
	}
	all := []series{
		{mem, "rss-MiB", "RSS after GC", red}, {mem, "heap-MiB", "Go heap", blue},
		{times, "save-s", "snapshot save", blue}, {times, "restore-s", "snapshot restore", red},
		{times, "releasable-s", "step-up's releasable read", green}, {times, "build-s", "bulk FSM apply (build)", orange},
		// BenchmarkScaleRestored and BenchmarkStepUpRealStore;
		// drawn only when the run has them.
		{mem, "rss-restored-MiB", "RSS, restored in a fresh process", green},
		{times, "stepup-assessed-s", "watcher step-up, all assessed", gray},
	}
	for _, l := range all {
		if !slices.ContainsFunc(rows, func(r map[string]float64) bool { _, ok := r[l.key]; return ok || l.key == "releasable-s" }) {
			continue
		}
		if l.key == "releasable-s" {
			for _, r := range rows {
				r["releasable-s"] = r["releasable-ms"] / 1000
			}
		}
		if err := line(l.p, l.key, l.label, l.c); err != nil {
			return err
		}
	}
	mem.Legend.Top, mem.Legend.Left = true, true
	times.Legend.Top, times.Legend.Left = true, true
	return save(png, 14*vg.Inch, 5*vg.Inch, mem, times)
}

func save(path string, w, h vg.Length, plots ...*plot.Plot) error {
	img := vgimg.New(w, h)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 1, Cols: len(plots), PadX: vg.Millimeter * 4, PadY: vg.Millimeter * 2,
		PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 2}
	canvases := plot.Align([][]*plot.Plot{plots}, tiles, dc)
	for i, p := range plots {
		p.Draw(canvases[0][i])
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
