package config

import (
	"errors"
	"strings"
	"testing"
)

func TestMPSShares(t *testing.T) {
	testCases := []struct {
		description string
		data        string
		wantErr     string // "" = valid
	}{
		{description: "a share", data: "[mps.shares.a]\ndevices = [\"0\"]\nactive-thread-percentage = 20\npinned-memory-limit = \"16G\"\n"},
		{description: "a quoted name with a dot", data: "[mps.shares.\"a.b\"]\ndevices = [\"GPU-1\"]\n"},
		{description: "no devices", data: "[mps.shares.a]\nactive-thread-percentage = 20\n",
			wantErr: `config f.toml: invalid mps.shares.a.devices []: want the share's GPUs, by index or UUID`},
		{description: "a MIG device", data: "[mps.shares.a]\ndevices = [\"0:1\", \"MIG-abc\"]\n",
			wantErr: `config f.toml: invalid mps.shares.a.devices[0] "0:1": want a whole GPU: MPS on MIG devices is not supported; invalid mps.shares.a.devices[1] "MIG-abc": want a whole GPU: MPS on MIG devices is not supported`},
		{description: "a list in one string", data: "[mps.shares.a]\ndevices = [\"0,1\"]\n",
			wantErr: `invalid mps.shares.a.devices[0] "0,1": want one GPU index or UUID`},
		{description: "a percentage over 100", data: "[mps.shares.a]\ndevices = [\"0\"]\nactive-thread-percentage = 120\n",
			wantErr: `invalid mps.shares.a.active-thread-percentage "120": want 1 to 100 (0 or absent: not set)`},
		{description: "a memory limit MPS does not take", data: "[mps.shares.a]\ndevices = [\"0\"]\npinned-memory-limit = \"60 TB\"\n",
			wantErr: `invalid mps.shares.a.pinned-memory-limit "60 TB": want a size MPS accepts, such as "60G" or "61440M"`},
		{description: "a bad name", data: "[mps.shares.\"../x\"]\ndevices = [\"0\"]\n",
			wantErr: `invalid mps.shares."../x" "../x": want a share name of letters, digits, '.', '_' and '-' (63 at most)`},
		{description: "a type error inside a share", data: "[mps.shares.a]\ndevices = \"0\"\n",
			wantErr: `parse config f.toml: line 2, column 11: mps.shares.a.devices must be an array of strings, not a string`},
		{description: "an integer as a string", data: "[mps.shares.a]\ndevices = [\"0\"]\nactive-thread-percentage = \"80\"\n",
			wantErr: `parse config f.toml: line 3, column 28: mps.shares.a.active-thread-percentage must be an integer, not a string`},
		{description: "a relative root", data: "[mps]\nroot = \"mps\"\n", wantErr: `invalid mps.root "mps": want an absolute path`},
		{description: "a forced share that is not configured", data: "[mps]\nshare = \"big\"\n[mps.shares.a]\ndevices = [\"0\"]\n",
			wantErr: `invalid mps.share "big": want one of the shares of [mps.shares]`},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			cfg, warnings, err := Parse([]byte(tc.data), "f.toml")
			if len(warnings) > 0 {
				t.Errorf("warnings %q", warnings)
			}
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				if len(cfg.MPS.Shares) != 1 {
					t.Errorf("shares %+v", cfg.MPS.Shares)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !errors.Is(err, ErrInvalid) {
				t.Errorf("error %v, want %q", err, tc.wantErr)
			}
		})
	}
	// An unknown key inside a share is a warning naming it, as elsewhere.
	_, warnings, err := Parse([]byte("[mps.shares.a]\ndevices = [\"0\"]\npercent = 5\n"), "f.toml")
	if err != nil || len(warnings) != 1 || warnings[0] != `config f.toml: unknown key "mps.shares.a.percent" ignored` {
		t.Errorf("warnings %q, %v", warnings, err)
	}
}

func TestMPSMemoryLimit(t *testing.T) {
	for in, want := range map[string]string{"60G": "60G", "60GiB": "60G", "60GB": "60G", "61440M": "61440M", "512 MiB": "512M", "0G": "", "60T": "", "-1G": "", "1.5G": ""} {
		got, ok := MPSMemoryLimit(in)
		if got != want || ok != (want != "") {
			t.Errorf("MPSMemoryLimit(%q) = %q, %v; want %q", in, got, ok, want)
		}
	}
}
