package hook

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"time"
)

// runcLog appends gpu-hook's lines, as logrus writes them, to the low-level runtime's log file
// in its format (runc's --log, --log-format): runc keeps a hook's output only when the hook
// fails, so a line saying, for example, that ldconfig ran and why would otherwise be lost.
type runcLog struct {
	path, format string
	now          func() time.Time // time.Now
}

// write appends one line at level ("info", "warning"); with no path it does nothing.
func (l runcLog) write(level, msg string) error {
	if l.path == "" {
		return nil
	}
	ts := l.now().Format(time.RFC3339)
	var line []byte
	switch l.format {
	case "json":
		b, err := json.Marshal(map[string]string{"level": level, "msg": msg, "time": ts}) // keys sorted, as logrus writes them
		if err != nil {
			return err
		}
		line = append(b, '\n')
	case "text", "":
		line = fmt.Appendf(nil, "time=%q level=%s msg=%s\n", ts, level, strconv.Quote(msg))
	default:
		return fmt.Errorf("--log-format %q: want text or json", l.format)
	}
	f, err := os.OpenFile(l.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("open log %s: %w", l.path, err)
	}
	_, werr := f.Write(line)
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		return fmt.Errorf("write log %s: %w", l.path, werr)
	}
	return nil
}
