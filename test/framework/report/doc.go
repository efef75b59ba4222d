// Package report gathers the figures a suite's specs measure into the Markdown table `make bench` prints,
// as the measurement programs print theirs.
package report
