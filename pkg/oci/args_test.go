package oci

import (
	"errors"
	"testing"
)

func TestParseArgs(t *testing.T) {
	testCases := []struct {
		description string
		args        []string
		want        Invocation
		wantErr     error
	}{
		{description: "containerd shim create", args: []string{"--root", "/run/containerd/runc/k8s.io", "--log", "/b/log.json", "--log-format", "json", "--systemd-cgroup", "create", "--bundle", "/b", "--pid-file", "/b/init.pid", "abc"},
			want: Invocation{Command: "create", Bundle: "/b", ContainerID: "abc", Log: "/b/log.json", LogFormat: "json"}},
		{description: "bundle with equals", args: []string{"create", "--bundle=/x", "id"}, want: Invocation{Command: "create", Bundle: "/x", ContainerID: "id", LogFormat: "text"}},
		{description: "short bundle", args: []string{"run", "-b", "/y", "id"}, want: Invocation{Command: "run", Bundle: "/y", ContainerID: "id", LogFormat: "text"}},
		{description: "short bundle with equals", args: []string{"run", "-b=/y", "id"}, want: Invocation{Command: "run", Bundle: "/y", ContainerID: "id", LogFormat: "text"}},
		{description: "single-dash long bundle", args: []string{"create", "-bundle", "/z", "id"}, want: Invocation{Command: "create", Bundle: "/z", ContainerID: "id", LogFormat: "text"}},
		{description: "id before flags", args: []string{"run", "id", "--bundle", "/z"}, want: Invocation{Command: "run", Bundle: "/z", ContainerID: "id", LogFormat: "text"}},
		{description: "no bundle means cwd", args: []string{"run", "-d", "id"}, want: Invocation{Command: "run", ContainerID: "id", LogFormat: "text"}},
		{description: "console socket value not taken as id", args: []string{"create", "--console-socket", "/s.sock", "id"}, want: Invocation{Command: "create", ContainerID: "id", LogFormat: "text"}},
		{description: "global flags with equals", args: []string{"--log=/l", "--log-format=json", "--debug", "create", "id"}, want: Invocation{Command: "create", ContainerID: "id", Log: "/l", LogFormat: "json"}},
		{description: "single-dash global log", args: []string{"-log", "/l", "run", "id"}, want: Invocation{Command: "run", ContainerID: "id", Log: "/l", LogFormat: "text"}},
		{description: "other subcommand: nothing else read", args: []string{"--root", "/r", "delete", "--force", "--bundle", "/ignored", "id"}, want: Invocation{Command: "delete", LogFormat: "text"}},
		{description: "version", args: []string{"--root", "/r", "--version"}, want: Invocation{LogFormat: "text", Version: true}},
		{description: "short version", args: []string{"-v"}, want: Invocation{LogFormat: "text", Version: true}},
		{description: "double dash ends flags", args: []string{"run", "--", "-weird-id"}, want: Invocation{Command: "run", ContainerID: "-weird-id", LogFormat: "text"}},
		{description: "missing bundle value", args: []string{"create", "--bundle"}, wantErr: ErrArgs},
		{description: "missing global value", args: []string{"--root"}, wantErr: ErrArgs},
		{description: "empty bundle means cwd, as runc reads it", args: []string{"create", "--bundle=", "id"}, want: Invocation{Command: "create", ContainerID: "id", LogFormat: "text"}},
		{description: "empty bundle as a separate value", args: []string{"run", "--bundle", "", "id"}, want: Invocation{Command: "run", ContainerID: "id", LogFormat: "text"}},
		{description: "restore: bundle and CRIU's value flags", args: []string{"--root", "/r", "restore", "--image-path", "/ckpt", "--work-path", "/w", "--tcp-established", "--bundle", "/b", "-d", "id"},
			want: Invocation{Command: "restore", Bundle: "/b", ContainerID: "id", LogFormat: "text"}},
		{description: "crun --config is refused", args: []string{"create", "--config", "other.json", "id"}, wantErr: ErrUnsupported},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			got, err := ParseArgs(tc.args)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("error = %v, want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestBundleDir(t *testing.T) {
	testCases := []struct {
		description, bundle, want string
	}{
		{"default is cwd", "", "/cwd"},
		{"relative joins cwd", "b/../c", "/cwd/c"},
		{"absolute cleaned", "/x//y/", "/x/y"},
	}
	for _, tc := range testCases {
		t.Run(tc.description, func(t *testing.T) {
			if got := (Invocation{Bundle: tc.bundle}).BundleDir("/cwd"); got != tc.want {
				t.Errorf("got %q want %q", got, tc.want)
			}
		})
	}
}
