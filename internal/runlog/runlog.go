// Package runlog builds gpu-runtime's logger so that its lines land where the low-level
// runtime's do, in the same format: runc's --log file (or stderr without one) with
// --log-format text or json, plus an optional extra file from the config. containerd shows
// users the msg of the last "level":"error" line of that file, so a failure before runc
// runs must be written there in runc's format.
package runlog

import (
	"fmt"
	"io"
	"os"

	"github.com/sirupsen/logrus"
)

// Options say where and how to log.
type Options struct {
	RuncLog   string // runc's --log; "" = stderr
	Format    string // runc's --log-format: "text" or "json"
	ExtraFile string // config runtime.log-file; "" = none
	Level     logrus.Level
	Stderr    io.Writer
}

// Logger is a configured logger and what it opened.
type Logger struct {
	*logrus.Logger
	files  []*lazyFile
	runc   *lazyFile // runc's --log; nil without one
	stderr io.Writer
}

// ToFile reports whether lines go to runc's log file rather than stderr (a file that could
// not be opened sends them to stderr).
func (l *Logger) ToFile() bool {
	return l.runc != nil && (!l.runc.tried || l.runc.f != nil)
}

// Report reports a failed command the way runc does: an error line "gpu-runtime: <err>" in
// the log (with container_id when the command names a container), and on stderr too when
// the log is a file, where engines show it.
func (l *Logger) Report(containerID string, err error) {
	var line logrus.FieldLogger = l
	if containerID != "" {
		line = l.WithField("container_id", containerID)
	}
	line.Error("gpu-runtime: " + err.Error())
	if l.ToFile() && l.stderr != nil {
		fmt.Fprintln(l.stderr, "gpu-runtime: "+err.Error())
	}
}

// New sets up the log destinations. Files are opened at the first line written to them:
// most calls (start, delete, state) log nothing and open nothing. A file that cannot be
// opened is reported on stderr and its lines go to stderr: logging must never stop a
// container, nor lose the line.
func New(opts Options) *Logger {
	l := &Logger{Logger: logrus.New(), stderr: opts.Stderr}
	l.SetLevel(opts.Level)
	if opts.Format == "json" {
		l.SetFormatter(&logrus.JSONFormatter{})
	} else {
		l.SetFormatter(&logrus.TextFormatter{DisableColors: true, FullTimestamp: true})
	}
	var writers []io.Writer
	if opts.RuncLog != "" {
		// runc's log is where engines read errors: if it cannot be opened, its lines go to
		// stderr rather than nowhere.
		l.runc = &lazyFile{path: opts.RuncLog, stderr: opts.Stderr, fallback: true}
		l.files = append(l.files, l.runc)
		writers = append(writers, l.runc)
	}
	if opts.ExtraFile != "" {
		f := &lazyFile{path: opts.ExtraFile, stderr: opts.Stderr}
		l.files = append(l.files, f)
		writers = append(writers, f)
	}
	if l.runc == nil {
		writers = append(writers, opts.Stderr)
		// On a terminal, routine info lines are noise (runc prints none either);
		// debug and trace are still honoured when asked for.
		if opts.Level == logrus.InfoLevel && len(l.files) == 0 {
			l.SetLevel(logrus.WarnLevel)
		}
	}
	l.SetOutput(io.MultiWriter(writers...))
	return l
}

// lazyFile opens its file for appending at the first write. If it cannot, it says so on
// stderr once, then sends its lines to stderr (fallback) or drops them.
type lazyFile struct {
	path     string
	stderr   io.Writer
	fallback bool
	f        *os.File
	tried    bool
}

func (l *lazyFile) Write(p []byte) (int, error) {
	if !l.tried {
		l.tried = true
		f, err := os.OpenFile(l.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		if err != nil {
			fmt.Fprintf(l.stderr, "gpu-runtime: open log file %s: %v\n", l.path, err)
		}
		l.f = f
	}
	switch {
	case l.f != nil:
		return l.f.Write(p)
	case l.fallback:
		return l.stderr.Write(p)
	}
	return len(p), nil
}

// Close closes the files the logger opened.
func (l *Logger) Close() {
	for _, f := range l.files {
		if f.f != nil {
			_ = f.f.Close()
		}
	}
	l.files = nil
}
