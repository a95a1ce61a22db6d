package main

import (
	"fmt"
	"image/color"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// plotResults draws release latency percentiles and throughput per
// scenario, side by side, into a PNG.
func plotResults(rs []Result, path string) error {
	names := make([]string, len(rs))
	for i, r := range rs {
		names[i] = strings.ReplaceAll(r.Name, " ", "\n")
	}
	lat := plot.New()
	lat.Title.Text = "Release latency (alloc complete → claim removed)"
	lat.Y.Label.Text = "ms"
	w := vg.Points(12)
	series := []struct {
		name string
		get  func(Result) float64
		c    color.Color
	}{
		{"p50", func(r Result) float64 { return r.P50ms }, color.RGBA{R: 66, G: 133, B: 244, A: 255}},
		{"p90", func(r Result) float64 { return r.P90ms }, color.RGBA{R: 251, G: 188, B: 5, A: 255}},
		{"p99", func(r Result) float64 { return r.P99ms }, color.RGBA{R: 234, G: 67, B: 53, A: 255}},
	}
	for i, s := range series {
		vals := make(plotter.Values, len(rs))
		for j, r := range rs {
			vals[j] = s.get(r)
		}
		bars, err := plotter.NewBarChart(vals, w)
		if err != nil {
			return err
		}
		bars.Color = s.c
		bars.LineStyle.Width = 0
		bars.Offset = vg.Length(i-1) * w
		lat.Add(bars)
		lat.Legend.Add(s.name, bars)
	}
	lat.Legend.Top = true
	lat.NominalX(names...)

	thr := plot.New()
	thr.Title.Text = "Release throughput"
	thr.Y.Label.Text = "claims/s"
	vals := make(plotter.Values, len(rs))
	for j, r := range rs {
		vals[j] = r.ClaimsPerSec
	}
	bars, err := plotter.NewBarChart(vals, vg.Points(24))
	if err != nil {
		return err
	}
	bars.Color = color.RGBA{R: 52, G: 168, B: 83, A: 255}
	bars.LineStyle.Width = 0
	thr.Add(bars)
	thr.NominalX(names...)
	labels, err := plotter.NewLabels(plotter.XYLabels{XYs: xys(vals), Labels: fmtVals(vals)})
	if err == nil {
		thr.Add(labels)
	}

	img := vgimg.New(14*vg.Inch, 5*vg.Inch)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 1, Cols: 2, PadX: vg.Millimeter * 4, PadY: vg.Millimeter * 2, PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 2}
	canvases := plot.Align([][]*plot.Plot{{lat, thr}}, tiles, dc)
	lat.Draw(canvases[0][0])
	thr.Draw(canvases[0][1])
	return savePNG(img, path)
}

func xys(v plotter.Values) plotter.XYs {
	out := make(plotter.XYs, len(v))
	for i, y := range v {
		out[i] = plotter.XY{X: float64(i), Y: y}
	}
	return out
}

func fmtVals(v plotter.Values) []string {
	out := make([]string, len(v))
	for i, y := range v {
		out[i] = fmt.Sprintf("%.0f", y)
	}
	return out
}
