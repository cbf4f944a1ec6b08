package clustertest

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"slices"
	"strings"
	"testing"
)

// TestPKI: the certificates the components are given chain to the cluster's CA, with the
// identities (common name, groups) RBAC and the node authorizer read, and the apiserver's
// serving certificate names 127.0.0.1.
func TestPKI(t *testing.T) {
	p, err := newPKI(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := p.issue("apiserver", "kube-apiserver", nil, []net.IP{net.ParseIP("127.0.0.1")}, []string{"kubernetes"}); err != nil {
		t.Fatal(err)
	}
	if err := p.issue("kubelet", "system:node:vm", []string{"system:nodes"}, nil, nil); err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(p.caCert)
	load := func(name string) *x509.Certificate {
		pair, err := tls.LoadX509KeyPair(p.path(name+".crt"), p.path(name+".key"))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		cert, err := x509.ParseCertificate(pair.Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		return cert
	}
	server := load("apiserver")
	if _, err := server.Verify(x509.VerifyOptions{Roots: roots, DNSName: "127.0.0.1"}); err != nil {
		t.Errorf("the apiserver's certificate for 127.0.0.1: %v", err)
	}
	client := load("kubelet")
	if _, err := client.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("the kubelet's client certificate: %v", err)
	}
	if client.Subject.CommonName != "system:node:vm" || !slices.Equal(client.Subject.Organization, []string{"system:nodes"}) {
		t.Errorf("kubelet identity %q %q", client.Subject.CommonName, client.Subject.Organization)
	}
	if err := p.serviceAccountKey(); err != nil {
		t.Fatal(err)
	}
	kc, err := p.kubeconfig("kubelet", "https://127.0.0.1:6443")
	if err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(kc)
	for _, want := range []string{"server: https://127.0.0.1:6443", "client-certificate: " + p.path("kubelet.crt"), "certificate-authority: " + p.path("ca.crt")} {
		if !strings.Contains(string(data), want) {
			t.Errorf("the kubeconfig lacks %q:\n%s", want, data)
		}
	}
	for _, f := range []string{"ca.key", "kubelet.key", "sa.key", "kubelet.kubeconfig"} {
		fi, err := os.Stat(p.path(f))
		if err != nil {
			t.Errorf("%s: %v", f, err)
		} else if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, want 0600", f, fi.Mode().Perm())
		}
	}
}
