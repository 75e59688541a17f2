// Package blockdevtest holds an in-memory blockdev.Device for tests of code
// that drives devices (the benchmark engine, frontends), and a conformance
// suite that every blockdev.Device implementation runs.
package blockdevtest
