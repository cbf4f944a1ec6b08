// Package enginetest runs real container engines for gpu-runtime's end-to-end suites
// (tests/engines, tests/packaging): private daemons in process groups of their own, stopped
// and cleaned up by pid and mount point under their own directories (never by name); commands
// run with their output in files; the host paths engines leave behind; a busybox image; and the
// probe a container runs to show which GPUs it got.
package enginetest

import "os"

// DockerClient is the docker client both Debian's docker.io and docker-ce ship. It is named by
// path because another docker may come first on PATH (one that does not match the daemon).
const DockerClient = "/usr/bin/docker"

// Dockerd returns the dockerd to start: Debian's docker.io installs /usr/sbin/dockerd,
// docker-ce /usr/bin/dockerd. When neither exists it returns Debian's, for a message naming it.
func Dockerd() string {
	for _, p := range []string{"/usr/sbin/dockerd", "/usr/bin/dockerd"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return "/usr/sbin/dockerd"
}
