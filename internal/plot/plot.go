package plot

import (
	"errors"
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

// Sample is one interval of a run.
type Sample struct {
	// At is the end of the interval, from the start of the run.
	At time.Duration
	// Operations and bytes per second completed in the interval.
	ReadIOPS, WriteIOPS float64
	ReadBW, WriteBW     float64
}

// Point is one point of a latency distribution: Percent of the requests
// completed within Latency.
type Point struct {
	Percent float64
	Latency time.Duration
}

// Run is what Plot draws.
type Run struct {
	// Title heads the picture, e.g. "randread 4KiB QD32 nvme://...".
	Title   string
	Samples []Sample
	// Read and Write are the latency distributions (either may be empty).
	Read, Write []Point
}

var (
	readColor  = color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}
	writeColor = color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}
)

// CheckPath tells, before a run, whether Plot could write path: a .svg or
// .png name in a directory that exists and is writable.
func CheckPath(path string) error {
	ext := strings.ToLower(filepath.Ext(path))
	if ext != ".svg" && ext != ".png" {
		return fmt.Errorf("plot %s: want a .svg or .png file name", path)
	}
	dir := filepath.Dir(path)
	fi, err := os.Stat(dir)
	switch {
	case err != nil:
		return fmt.Errorf("plot %s: %w", path, err)
	case !fi.IsDir():
		return fmt.Errorf("plot %s: %s is not a directory", path, dir)
	}
	if err := unix.Access(dir, unix.W_OK); err != nil {
		return fmt.Errorf("plot %s: directory %s is not writable", path, dir)
	}
	return nil
}

// Plot draws run to path; the extension picks the format (.svg or .png).
func Plot(path string, run Run) error {
	if err := CheckPath(path); err != nil {
		return err
	}
	if len(run.Samples) == 0 && len(run.Read) == 0 && len(run.Write) == 0 {
		return errors.New("plot: nothing was measured")
	}
	iops, err := overTime(run, "IOPS", 1, func(s Sample) (float64, float64) { return s.ReadIOPS, s.WriteIOPS })
	if err != nil {
		return err
	}
	bw, err := overTime(run, "MB/s", 1e-6, func(s Sample) (float64, float64) { return s.ReadBW, s.WriteBW })
	if err != nil {
		return err
	}
	lat, err := distribution(run)
	if err != nil {
		return err
	}
	iops.Title.Text = run.Title
	const w, h = 8 * vg.Inch, 10 * vg.Inch
	var c draw.Canvas
	var write func(*os.File) error
	if strings.EqualFold(filepath.Ext(path), ".svg") {
		cv := vgsvg.New(w, h)
		c = draw.New(cv)
		write = func(f *os.File) error { _, err := cv.WriteTo(f); return err }
	} else {
		cv := vgimg.New(w, h)
		c = draw.New(cv)
		write = func(f *os.File) error { _, err := vgimg.PngCanvas{Canvas: cv}.WriteTo(f); return err }
	}
	// White background (PNG is transparent otherwise).
	c.SetColor(color.White)
	c.Fill(c.Rectangle.Path())
	tiles := draw.Tiles{Rows: 3, Cols: 1, PadTop: vg.Points(8), PadBottom: vg.Points(8), PadX: vg.Points(8), PadY: vg.Points(14), PadLeft: vg.Points(8), PadRight: vg.Points(12)}
	plots := [][]*plot.Plot{{iops}, {bw}, {lat}}
	canvases := plot.Align(plots, tiles, c)
	for i := range plots {
		plots[i][0].Draw(canvases[i][0])
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	if err := write(f); err != nil {
		f.Close()
		return fmt.Errorf("plot %s: %w", path, err)
	}
	return f.Close()
}

// overTime plots a read and a write series against seconds.
func overTime(run Run, unit string, scale float64, get func(Sample) (float64, float64)) (*plot.Plot, error) {
	p := plot.New()
	p.X.Label.Text = "time (s)"
	p.Y.Label.Text = unit
	p.Y.Min = 0
	p.Add(plotter.NewGrid())
	rd, wr := make(plotter.XYs, 0, len(run.Samples)), make(plotter.XYs, 0, len(run.Samples))
	var anyR, anyW bool
	for _, s := range run.Samples {
		r, w := get(s)
		t := s.At.Seconds()
		rd = append(rd, plotter.XY{X: t, Y: r * scale})
		wr = append(wr, plotter.XY{X: t, Y: w * scale})
		anyR, anyW = anyR || r > 0, anyW || w > 0
	}
	for _, ser := range []struct {
		name string
		pts  plotter.XYs
		show bool
		col  color.Color
	}{{"read", rd, anyR, readColor}, {"write", wr, anyW, writeColor}} {
		if !ser.show {
			continue
		}
		l, err := plotter.NewLine(ser.pts)
		if err != nil {
			return nil, fmt.Errorf("plot: %w", err)
		}
		l.Color = ser.col
		l.Width = vg.Points(1.5)
		p.Add(l)
		p.Legend.Add(ser.name, l)
	}
	p.Legend.Top = true
	return p, nil
}

// distribution plots latency percentiles: x the latency (log scale),
// y the share of requests completed within it.
func distribution(run Run) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = "completion latency distribution"
	p.X.Label.Text = "latency (µs, log scale)"
	p.Y.Label.Text = "% of requests completed within"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Y.Min, p.Y.Max = 0, 100
	p.Add(plotter.NewGrid())
	for _, ser := range []struct {
		name string
		pts  []Point
		col  color.Color
	}{{"read", run.Read, readColor}, {"write", run.Write, writeColor}} {
		if len(ser.pts) == 0 {
			continue
		}
		xy := make(plotter.XYs, 0, len(ser.pts))
		for _, pt := range ser.pts {
			us := math.Max(float64(pt.Latency)/1e3, 0.1)
			xy = append(xy, plotter.XY{X: us, Y: pt.Percent})
		}
		l, err := plotter.NewLine(xy)
		if err != nil {
			return nil, fmt.Errorf("plot: %w", err)
		}
		l.Color = ser.col
		l.Width = vg.Points(1.5)
		p.Add(l)
		p.Legend.Add(ser.name, l)
	}
	p.Legend.Left = true
	p.Legend.Top = true
	return p, nil
}
