package clustertest

import (
	"slices"
	"testing"
)

func TestSplitRule(t *testing.T) {
	testCases := []struct {
		rule string
		want []string
	}{
		{"-A INPUT -j KUBE-FIREWALL", []string{"-A", "INPUT", "-j", "KUBE-FIREWALL"}},
		{`-A KUBE-FIREWALL ! -s 127.0.0.0/8 -d 127.0.0.0/8 -m comment --comment "block incoming localnet connections" -j DROP`,
			[]string{"-A", "KUBE-FIREWALL", "!", "-s", "127.0.0.0/8", "-d", "127.0.0.0/8", "-m", "comment", "--comment", "block incoming localnet connections", "-j", "DROP"}},
		{`-A X -m comment --comment "a \"quoted\" word" -j Y`, []string{"-A", "X", "-m", "comment", "--comment", `a "quoted" word`, "-j", "Y"}},
		{`-A X --comment ""`, []string{"-A", "X", "--comment", ""}},
	}
	for _, tc := range testCases {
		if got := splitRule(tc.rule); !slices.Equal(got, tc.want) {
			t.Errorf("splitRule(%q) = %q, want %q", tc.rule, got, tc.want)
		}
	}
}
