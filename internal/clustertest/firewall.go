package clustertest

import (
	"os/exec"
	"slices"
	"strings"
)

// firewall is what iptables, ip6tables and nftables held at one moment: the chains
// ("iptables/<table>/<chain>"), the rules ("iptables/<table>/-A …", as iptables-save prints
// them) and the nftables tables ("ip filter"). The kubelet adds chains for its own monitoring
// (KUBE-FIREWALL, KUBE-KUBELET-CANARY, KUBE-IPTABLES-HINT), rules jumping to them and, on a
// host without any, the tables holding them.
type firewall struct {
	Chains, Rules, Tables map[string]bool
	Taken                 bool
}

var firewallTools = []string{"iptables", "ip6tables"}

func snapshotFirewall() firewall {
	f := firewall{Chains: map[string]bool{}, Rules: map[string]bool{}, Tables: map[string]bool{}, Taken: true}
	for _, tool := range firewallTools {
		out, err := exec.Command(tool + "-save").Output()
		if err != nil {
			continue
		}
		table := ""
		for _, line := range strings.Split(string(out), "\n") {
			switch {
			case strings.HasPrefix(line, "*"):
				table = line[1:]
			case strings.HasPrefix(line, ":"):
				if fields := strings.Fields(line[1:]); len(fields) > 0 {
					f.Chains[tool+"/"+table+"/"+fields[0]] = true
				}
			case strings.HasPrefix(line, "-A "):
				f.Rules[tool+"/"+table+"/"+line] = true
			}
		}
	}
	if out, err := exec.Command("nft", "list", "tables").Output(); err == nil {
		for _, line := range strings.Split(string(out), "\n") {
			if t, ok := strings.CutPrefix(strings.TrimSpace(line), "table "); ok {
				f.Tables[t] = true
			}
		}
	}
	return f
}

// added lists what is there now and was not when f was taken: iptables rules, KUBE-* chains and
// nftables tables.
func (f firewall) added() []string {
	if !f.Taken {
		return nil
	}
	now := snapshotFirewall()
	var out []string
	for r := range now.Rules {
		if !f.Rules[r] {
			out = append(out, "iptables rule "+r)
		}
	}
	for ch := range now.Chains {
		if !f.Chains[ch] && strings.HasPrefix(ch[strings.LastIndexByte(ch, '/')+1:], "KUBE-") {
			out = append(out, "iptables chain "+ch)
		}
	}
	for t := range now.Tables {
		if !f.Tables[t] {
			out = append(out, "nftables table "+t)
		}
	}
	slices.Sort(out)
	return out
}

// restore removes the KUBE-* chains added since f was taken, with the rules in them and the
// added rules jumping to them, then the nftables tables added since that are left empty of
// rules. Nothing that was there before is touched.
func (f firewall) restore() {
	if !f.Taken {
		return
	}
	now := snapshotFirewall()
	ours := map[string]bool{} // tool/table/chain
	for ch := range now.Chains {
		if !f.Chains[ch] && strings.HasPrefix(ch[strings.LastIndexByte(ch, '/')+1:], "KUBE-") {
			ours[ch] = true
		}
	}
	for r := range now.Rules {
		if f.Rules[r] {
			continue
		}
		parts := strings.SplitN(r, "/", 3)
		args := splitRule(parts[2])
		for i := 0; i+1 < len(args); i++ {
			if (args[i] == "-j" || args[i] == "-g") && ours[parts[0]+"/"+parts[1]+"/"+args[i+1]] {
				_ = exec.Command(parts[0], append([]string{"-t", parts[1], "-D"}, args[1:]...)...).Run()
				break
			}
		}
	}
	for ch := range ours {
		parts := strings.SplitN(ch, "/", 3)
		_ = exec.Command(parts[0], "-t", parts[1], "-F", parts[2]).Run()
		_ = exec.Command(parts[0], "-t", parts[1], "-X", parts[2]).Run()
	}
	after := snapshotFirewall()
	for t := range after.Tables {
		if f.Tables[t] {
			continue
		}
		family, name, _ := strings.Cut(t, " ")
		tool := map[string]string{"ip": "iptables", "ip6": "ip6tables"}[family]
		empty := tool != ""
		for r := range after.Rules {
			if strings.HasPrefix(r, tool+"/"+name+"/") {
				empty = false
			}
		}
		if empty {
			_ = exec.Command("nft", "delete", "table", family, name).Run()
		}
	}
}

// splitRule splits an iptables-save rule into arguments: words, and double-quoted strings
// with backslash escapes.
func splitRule(rule string) []string {
	var args []string
	var cur strings.Builder
	inQuote, escaped, has := false, false, false
	for _, r := range rule {
		switch {
		case escaped:
			cur.WriteRune(r)
			escaped = false
		case r == '\\' && inQuote:
			escaped = true
		case r == '"':
			inQuote, has = !inQuote, true
		case r == ' ' && !inQuote:
			if has {
				args = append(args, cur.String())
				cur.Reset()
				has = false
			}
		default:
			cur.WriteRune(r)
			has = true
		}
	}
	if has {
		args = append(args, cur.String())
	}
	return args
}
