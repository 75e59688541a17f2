// Package units parses and prints byte sizes the way storage tools write
// them: 4096, 4k, 4KiB, 128K, 1MiB, 1G, 1.5GiB (k/K, KB and KiB all mean
// 1024, as in fio).
package units
