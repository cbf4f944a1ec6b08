package enginetest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Result is what a command printed and how it ended.
type Result struct {
	Stdout, Stderr string
	Code           int // -1 when it did not run or was killed
}

func (r Result) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.Code, r.Stdout, r.Stderr)
}

// Run runs a command to completion with the given extra environment and stdin file ("" for
// none), killing it after timeout, and fails t when it cannot run or times out. Output goes to files, not pipes: a process the command
// leaves behind (a shim, conmon, a container) could otherwise hold a pipe open forever.
// Its output goes to files in a new directory under dir, removed afterwards.
func Run(t testing.TB, dir string, timeout time.Duration, env []string, stdin, name string, args ...string) Result {
	t.Helper()
	out, err := os.MkdirTemp(dir, "cmd-")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = os.RemoveAll(out) }()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.WaitDelay = 5 * time.Second
	outFile, errFile := openOut(t, out, "stdout"), openOut(t, out, "stderr")
	defer outFile.Close()
	defer errFile.Close()
	cmd.Stdout, cmd.Stderr = outFile, errFile
	if stdin != "" {
		in, err := os.Open(stdin)
		if err != nil {
			t.Fatal(err)
		}
		defer in.Close()
		cmd.Stdin = in
	}
	runErr := cmd.Run()
	stdout, _ := os.ReadFile(outFile.Name())
	stderr, _ := os.ReadFile(errFile.Name())
	r := Result{Stdout: string(stdout), Stderr: string(stderr), Code: -1}
	if cmd.ProcessState != nil {
		r.Code = cmd.ProcessState.ExitCode()
	}
	if ctx.Err() != nil {
		t.Fatalf("%s %s: timed out after %v\n%s", name, strings.Join(args, " "), timeout, r)
	}
	var exitErr *exec.ExitError
	if runErr != nil && !errors.As(runErr, &exitErr) {
		t.Fatalf("%s %s: %v", name, strings.Join(args, " "), runErr)
	}
	return r
}

func openOut(t testing.TB, dir, name string) *os.File {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(dir, name), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	return f
}
