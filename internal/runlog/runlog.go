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
	files []*os.File
	// ToFile is true when lines go to a file rather than stderr.
	ToFile bool
}

// New opens the log destinations. A destination that cannot be opened is reported on
// stderr and skipped: logging must never stop a container.
func New(opts Options) *Logger {
	l := &Logger{Logger: logrus.New()}
	l.SetLevel(opts.Level)
	if opts.Format == "json" {
		l.SetFormatter(&logrus.JSONFormatter{})
	} else {
		l.SetFormatter(&logrus.TextFormatter{DisableColors: true, FullTimestamp: true})
	}
	var writers []io.Writer
	for _, p := range []string{opts.RuncLog, opts.ExtraFile} {
		if p == "" {
			continue
		}
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		if err != nil {
			fmt.Fprintf(opts.Stderr, "gpu-runtime: open log file %s: %v\n", p, err)
			continue
		}
		l.files = append(l.files, f)
		writers = append(writers, f)
	}
	l.ToFile = opts.RuncLog != "" && len(l.files) > 0
	if opts.RuncLog == "" || !l.ToFile {
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

// Close closes the files the logger opened.
func (l *Logger) Close() {
	for _, f := range l.files {
		_ = f.Close()
	}
	l.files = nil
}
