package config

import (
	"os"
	"testing"
)

// BenchmarkParseShipped: the shipped config, as every create reads it.
func BenchmarkParseShipped(b *testing.B) {
	data, err := os.ReadFile(shippedConfig)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := Parse(data, "c"); err != nil {
			b.Fatal(err)
		}
	}
}
