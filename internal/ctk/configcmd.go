package ctk

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/gpu-runtime/gpu-runtime/internal/atomicfile"
	"github.com/gpu-runtime/gpu-runtime/pkg/config"
)

const configUsage = `usage:
  gpu-ctk config [--config FILE]
  gpu-ctk config --set KEY=VALUE... [--config FILE]

Without --set, config prints the configuration gpu-runtime uses — the file (GPU_RUNTIME_CONFIG,
else /etc/gpu-runtime/config.toml) over the defaults — as TOML, every key with its value.
--set changes keys of the file in place: each KEY=VALUE (KEY is section.name, e.g.
driver.root=/run/nvidia/driver; a list is comma-separated or a TOML array) rewrites that key's
line, keeping comments and everything else as it is. The result is validated as gpu-runtime
would read it before anything is written (all the --set together); then the file is replaced
atomically. An unknown key is refused naming the nearest known one. An MPS share is set key by
key, mps.shares.NAME.KEY (KEY: devices, active-thread-percentage, pinned-memory-limit, uid); a
new share is added as its own table and needs its devices, e.g.
  gpu-ctk config --set mps.shares.small.devices=0 --set mps.shares.small.active-thread-percentage=20
(then gpu-ctk mps start small). The keys:
`

func runConfig(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("gpu-ctk config", flag.ContinueOnError)
	file := fs.String("config", "", "the configuration file (default: GPU_RUNTIME_CONFIG, else "+config.DefaultPath+")")
	var sets listFlag
	fs.Var(&sets, "set", "KEY=VALUE to write into the file (repeatable)")
	usage := configUsage + "  " + strings.Join(config.Keys(), "\n  ") + "\n"
	if help, err := parseNoArgs(fs, args, usage, stdout); help || err != nil {
		return err
	}
	path := cmp.Or(*file, config.Path(os.Getenv))
	if len(sets) == 0 {
		return printConfig(path, *file != "", stdout, stderr)
	}
	return setConfig(path, sets, stdout)
}

// printConfig prints the effective configuration of path. A named file (--config or
// GPU_RUNTIME_CONFIG) must exist, as for gpu-runtime.
func printConfig(path string, named bool, stdout, stderr io.Writer) error {
	var cfg config.Config
	var warnings []string
	var err error
	if named {
		if _, serr := os.Stat(path); serr != nil {
			return fmt.Errorf("read config %s: %w", path, serr)
		}
		cfg, warnings, err = config.Load(path)
	} else {
		cfg, warnings, err = config.LoadFromEnv(os.Getenv)
	}
	warn(stderr, warnings...)
	if err != nil {
		return err
	}
	data, err := config.Marshal(cfg)
	if err != nil {
		return err
	}
	source := path + " over the defaults"
	if _, serr := os.Stat(path); serr != nil {
		source = "the defaults (no " + path + ")"
	}
	_, err = fmt.Fprintf(stdout, "# The configuration gpu-runtime uses: %s.\n%s", source, data)
	return err
}

// setConfig applies every KEY=VALUE to the file, validates the result and writes it once.
func setConfig(path string, sets []string, stdout io.Writer) error {
	data, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("read config %s: %w", path, err)
	}
	created := err != nil
	if !created {
		// Only a file gpu-runtime can read is edited: a broken one is for its owner to fix.
		if _, _, err := config.Load(path); err != nil {
			return fmt.Errorf("%w; fix the file first (gpu-ctk config --set edits only a valid file)", err)
		}
	}
	var pairs [][2]string
	for _, kv := range sets {
		key, value, ok := strings.Cut(kv, "=")
		if !ok {
			return fmt.Errorf("%w: --set %q: want KEY=VALUE, e.g. driver.root=/run/nvidia/driver", ErrUsage, kv)
		}
		pairs = append(pairs, [2]string{strings.TrimSpace(key), value})
	}
	// Validated once, all set: a new MPS share's devices and limits come together.
	out, err := config.SetKeys(data, path, pairs)
	if err != nil {
		return fmt.Errorf("--set %s: %w; %s not changed", strings.Join(sets, " --set "), err, path)
	}
	if string(out) == string(data) && !created {
		_, err := fmt.Fprintf(stdout, "%s: already so; nothing written\n", path)
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	mode := fs.FileMode(0o644)
	if fi, err := os.Stat(path); err == nil {
		mode = fi.Mode().Perm()
	}
	if err := atomicfile.Write(path, out, mode, atomicfile.Options{Follow: true, KeepOwner: true}); err != nil {
		return err
	}
	_, err = fmt.Fprintf(stdout, "%s: set %s\n", path, strings.Join(sets, ", "))
	return err
}
