/*
 * net.c - the network between the NIC and the streams: MTUs (port,
 * netdev, configured streams, peer), PFC and ECN for RoCE, firewall rules
 * that would drop RoCE v2 (UDP 4791), the control and recovery ports or
 * the multicast groups, rp_filter and IGMP on multicast interfaces, and
 * the socket buffer ceiling against the configured rcvbuf.
 */
#include "tools/doctor/doctor.h"

#include "bus/config.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The RoCE MTU a netdev MTU allows: the largest IB MTU that fits after
 * the RoCE v2 headers, as the kernel's iboe_get_mtu() computes it. */
static int roce_mtu(long eth_mtu)
{
	long room = eth_mtu - 96;

	for (int m = 4096; m >= 256; m /= 2)
		if (room >= m)
			return m;
	return 0;
}

/* The netdevs to look at: the RDMA ports' and the udp streams'
 * interfaces that name a netdev; `names` gets up to 16. */
static int netdevs(const tb_doctor_t *d, char names[][64])
{
	int n = 0;

	for (int i = 0; i < d->n_ports && n < 16; i++) {
		int dup = 0;

		if (!d->ports[i].ndev[0])
			continue;
		for (int k = 0; k < n; k++)
			dup |= !strcmp(names[k], d->ports[i].ndev);
		if (!dup)
			snprintf(names[n++], 64, "%s", d->ports[i].ndev);
	}
	for (int i = 0; i < d->n_streams && n < 16; i++) {
		const char *ifc = d->streams[i]->interface;
		char path[160];
		int dup = 0;

		if (!ifc[0] || d->streams[i]->transport != TB_TRANSPORT_UDP)
			continue;
		snprintf(path, sizeof(path), "/sys/class/net/%s", ifc);
		if (!tb_doctor_exists(d, path))
			continue;
		for (int k = 0; k < n; k++)
			dup |= !strcmp(names[k], ifc);
		if (!dup)
			snprintf(names[n++], 64, "%s", ifc);
	}
	return n;
}

/* Is stream `s` carried by netdev `ndev`?  ud: the RDMA ports' netdev;
 * udp: its interface (or, unnamed, any). */
static int carried_by(const tb_doctor_t *d, const tb_stream_cfg_t *s,
		      const char *ndev)
{
	if (s->transport == TB_TRANSPORT_UDP)
		return !s->interface[0] || !strcmp(s->interface, ndev);
	if (s->transport == TB_TRANSPORT_UD || s->transport == TB_TRANSPORT_RC)
		for (int i = 0; i < d->n_ports; i++)
			if (!strcmp(d->ports[i].ndev, ndev))
				return 1;
	return 0;
}

static void mtu(tb_doctor_t *d, char names[][64], int n)
{
	if (n == 0) {
		tb_doctor_report(d, "net.mtu", "", TB_DOCTOR_SKIPPED,
				 "configure a udp stream's interface, or an "
				 "RDMA port", "no RDMA netdev and no udp "
				 "interface to check");
		return;
	}
	for (int i = 0; i < n; i++) {
		char path[160], fix[512], bad[256] = "";
		long m;
		int r, worst = TB_DOCTOR_OK, any_rdma = 0;

		snprintf(path, sizeof(path), "/sys/class/net/%s/mtu", names[i]);
		if (tb_doctor_read_long(d, path, &m) != 0) {
			tb_doctor_report(d, "net.mtu", names[i],
					 TB_DOCTOR_SKIPPED, "check the netdev "
					 "name", "no %s", path);
			continue;
		}
		r = roce_mtu(m);
		for (int k = 0; k < d->n_ports; k++)
			any_rdma |= !strcmp(d->ports[k].ndev, names[i]);
		for (int s = 0; s < d->n_streams; s++) {
			const tb_stream_cfg_t *c = d->streams[s];
			long limit;

			if (!carried_by(d, c, names[i]) || !c->mtu ||
			    c->transport == TB_TRANSPORT_RC)
				continue;
			limit = c->transport == TB_TRANSPORT_UD ? r : m - 28;
			if ((long)c->mtu > limit) {
				worst = TB_DOCTOR_FAIL;
				snprintf(bad + strlen(bad),
					 sizeof(bad) - strlen(bad),
					 "%s[stream %s] mtu = %u > %ld",
					 bad[0] ? "; " : "", c->name, c->mtu,
					 limit);
			}
		}
		if (worst == TB_DOCTOR_FAIL) {
			snprintf(fix, sizeof(fix), "lower the streams' mtu to "
				 "what the path carries (ud: the RoCE MTU %d; "
				 "udp: the netdev MTU - 28 = %ld), or raise the "
				 "netdev's: ip link set dev %s mtu 9000 (and "
				 "every switch port and peer on the path)", r,
				 m - 28, names[i]);
			tb_doctor_report(d, "net.mtu", names[i], TB_DOCTOR_FAIL,
					 fix, "netdev MTU %ld (RoCE MTU %d): %s",
					 m, r, bad);
		} else if (d->peer_mtu && (long)d->peer_mtu != m) {
			snprintf(fix, sizeof(fix), "set the same MTU on both "
				 "hosts and every switch port between them: ip "
				 "link set dev %s mtu %u (or the peer's to %ld)",
				 names[i], d->peer_mtu, m);
			tb_doctor_report(d, "net.mtu", names[i], TB_DOCTOR_FAIL,
					 fix, "netdev MTU %ld, the peer's %u: "
					 "the larger side's datagrams are "
					 "dropped or fragmented", m,
					 d->peer_mtu);
		} else if (any_rdma && r < 4096) {
			snprintf(fix, sizeof(fix), "ip link set dev %s mtu "
				 "9000 (and the switch ports): RoCE then runs "
				 "at 4096", names[i]);
			tb_doctor_report(d, "net.mtu", names[i], TB_DOCTOR_WARN,
					 fix, "netdev MTU %ld: RoCE MTU %d, a "
					 "quarter of the throughput per packet "
					 "of 4096", m, r);
		} else {
			tb_doctor_report(d, "net.mtu", names[i], TB_DOCTOR_OK,
					 NULL, "netdev MTU %ld%s%s; configured "
					 "streams fit", m, any_rdma ?
					 ", RoCE MTU " : "",
					 any_rdma ? (r == 4096 ? "4096" : "<4096")
						  : "");
		}
	}
}

/* PFC from `dcb pfc show dev X` (iproute2), ECN from mlx5's sysfs. */
static void pfc_ecn(tb_doctor_t *d)
{
	int any = 0;

	for (int i = 0; i < d->n_ports; i++) {
		tb_doctor_port_t *p = &d->ports[i];
		char name[96], cmd[160], out[2048], path[256], fix[512];
		long np = -1, rp = -1;

		if (!p->ethernet || !p->ndev[0])
			continue;
		any = 1;
		snprintf(name, sizeof(name), "dcb-pfc-%s", p->ndev);
		snprintf(cmd, sizeof(cmd), "dcb pfc show dev %s", p->ndev);
		snprintf(fix, sizeof(fix), "enable PFC on the RoCE priority "
			 "(3 by convention) on the host and every switch port: "
			 "dcb pfc set dev %s prio-pfc 3:on (or mlnx_qos -i %s "
			 "--pfc 0,0,0,1,0,0,0,0), and trust DSCP: mlnx_qos -i "
			 "%s --trust dscp", p->ndev, p->ndev, p->ndev);
		if (tb_doctor_cmd(d, name, cmd, out, sizeof(out)) < 0) {
			tb_doctor_report(d, "net.pfc", p->ndev,
					 TB_DOCTOR_SKIPPED,
					 "install iproute2's dcb (or "
					 "mlnx_qos) and rerun as root",
					 "PFC state not readable (%s)", cmd);
		} else {
			char *pc = strstr(out, "prio-pfc");
			int on = 0;

			for (char *q = pc; q && (q = strstr(q, ":on")); q++)
				on++;
			if (on)
				tb_doctor_report(d, "net.pfc", p->ndev,
						 TB_DOCTOR_OK, NULL,
						 "PFC on for %d priorities", on);
			else
				tb_doctor_report(d, "net.pfc", p->ndev,
						 TB_DOCTOR_WARN, fix,
						 "PFC off on every priority: "
						 "RoCE loses packets under "
						 "congestion and retransmits "
						 "(low throughput, latency "
						 "spikes)");
		}
		snprintf(path, sizeof(path), "/sys/class/net/%s/ecn/roce_np/"
			 "enable/3", p->ndev);
		tb_doctor_read_long(d, path, &np);
		snprintf(path, sizeof(path), "/sys/class/net/%s/ecn/roce_rp/"
			 "enable/3", p->ndev);
		tb_doctor_read_long(d, path, &rp);
		snprintf(fix, sizeof(fix), "echo 1 > /sys/class/net/%s/ecn/"
			 "roce_np/enable/3; echo 1 > /sys/class/net/%s/ecn/"
			 "roce_rp/enable/3 (and ECN marking on the switches)",
			 p->ndev, p->ndev);
		if (np < 0 && rp < 0)
			tb_doctor_report(d, "net.ecn", p->ndev,
					 TB_DOCTOR_SKIPPED,
					 "this driver does not show ECN in "
					 "sysfs; check with the vendor's tool",
					 "no /sys/class/net/%s/ecn", p->ndev);
		else if (np == 1 && rp == 1)
			tb_doctor_report(d, "net.ecn", p->ndev, TB_DOCTOR_OK,
					 NULL, "RoCE ECN (DCQCN) on for "
					 "priority 3, both ends");
		else
			tb_doctor_report(d, "net.ecn", p->ndev, TB_DOCTOR_WARN,
					 fix, "RoCE ECN on priority 3: "
					 "notification point %ld, reaction "
					 "point %ld", np, rp);
	}
	if (!any) {
		tb_doctor_report(d, "net.pfc", "", TB_DOCTOR_SKIPPED,
				 "PFC matters to RoCE only", "no RoCE port");
		tb_doctor_report(d, "net.ecn", "", TB_DOCTOR_SKIPPED,
				 "ECN matters to RoCE only", "no RoCE port");
	}
}

/* 1 if the ruleset line drops or rejects. */
static int drops(const char *line)
{
	return strstr(line, "drop") || strstr(line, "DROP") ||
	       strstr(line, "reject") || strstr(line, "REJECT");
}

/* 1 if `line` names port `port` as a whole number. */
static int names_port(const char *line, unsigned port)
{
	char pat[16];
	size_t n = (size_t)snprintf(pat, sizeof(pat), "%u", port);

	for (const char *p = strstr(line, pat); p; p = strstr(p + 1, pat))
		if ((p == line || !isdigit((unsigned char)p[-1])) &&
		    !isdigit((unsigned char)p[n]))
			return 1;
	return 0;
}

static void firewall(tb_doctor_t *d)
{
	static char rules[1 << 16];
	char hits[512] = "", what[64];
	unsigned ports[2 + 3 * 64];
	const char *pnames[2 + 3 * 64];
	int np = 0, policy_drop = 0;

	if (tb_doctor_cmd(d, "ruleset", "nft list ruleset || iptables-save",
			  rules, sizeof(rules)) < 0) {
		tb_doctor_report(d, "net.firewall", "", TB_DOCTOR_OK, NULL,
				 "no firewall rules (nft and iptables-save "
				 "print none)");
		return;
	}
	if (d->needs_rdma != 0) {
		ports[np] = 4791;
		pnames[np++] = "RoCE v2 (udp 4791)";
	}
	for (int i = 0; i < d->n_streams && np < (int)(sizeof(ports) /
						      sizeof(ports[0])) - 3; i++) {
		const tb_stream_cfg_t *s = d->streams[i];

		if (s->control.port) {
			ports[np] = s->control.port;
			pnames[np++] = "a control port";
		}
		for (int k = 0; k < s->n_recovery && k < 1; k++) {
			ports[np] = s->recovery[k].port;
			pnames[np++] = "a recovery port";
		}
		if (s->group.port) {
			ports[np] = s->group.port;
			pnames[np++] = "a multicast group's port";
		}
	}
	for (char *line = rules; line && *line;) {
		char *nl = strchr(line, '\n');

		if (nl)
			*nl = '\0';
		if ((strstr(line, "policy drop") || strstr(line, ":INPUT DROP")))
			policy_drop = 1;
		if (drops(line)) {
			for (int k = 0; k < np; k++)
				if (names_port(line, ports[k]) &&
				    strlen(hits) < sizeof(hits) - 100) {
					snprintf(what, sizeof(what), "%s", pnames[k]);
					snprintf(hits + strlen(hits),
						 sizeof(hits) - strlen(hits),
						 "%s%s %u: '%.60s'",
						 hits[0] ? "; " : "", what,
						 ports[k], line);
				}
			for (int i = 0; i < d->n_streams; i++)
				if (d->streams[i]->group.host[0] &&
				    strstr(line, d->streams[i]->group.host) &&
				    strlen(hits) < sizeof(hits) - 100)
					snprintf(hits + strlen(hits),
						 sizeof(hits) - strlen(hits),
						 "%sgroup %s: '%.60s'",
						 hits[0] ? "; " : "",
						 d->streams[i]->group.host, line);
		}
		line = nl ? nl + 1 : NULL;
	}
	if (hits[0])
		tb_doctor_report(d, "net.firewall", "", TB_DOCTOR_FAIL,
				 "accept them before the drop: nft insert rule "
				 "inet filter input udp dport 4791 accept (and "
				 "the same for each port and group named)",
				 "rules drop %s", hits);
	else if (policy_drop)
		tb_doctor_report(d, "net.firewall", "", TB_DOCTOR_WARN,
				 "add accept rules for udp 4791, the control "
				 "and recovery ports and the multicast groups "
				 "(nft add rule inet filter input udp dport "
				 "4791 accept)",
				 "the input policy drops, and no rule names "
				 "tickbus's ports: check they are accepted");
	else
		tb_doctor_report(d, "net.firewall", "", TB_DOCTOR_OK, NULL,
				 "no rule drops RoCE v2 or the configured ports "
				 "and groups");
}

/* rp_filter and IGMP on the interfaces multicast arrives on. */
static void multicast(tb_doctor_t *d, char names[][64], int n)
{
	long all = 0, maxm = 20;
	int groups = 0, any = 0;

	for (int i = 0; i < d->n_streams; i++)
		groups += d->streams[i]->transport == TB_TRANSPORT_UD ||
			  d->streams[i]->transport == TB_TRANSPORT_UDP;
	tb_doctor_read_long(d, "/proc/sys/net/ipv4/conf/all/rp_filter", &all);
	for (int i = 0; i < n; i++) {
		char path[160], fix[256];
		long v = 0, force = 0;

		any = 1;
		snprintf(path, sizeof(path), "/proc/sys/net/ipv4/conf/%s/"
			 "rp_filter", names[i]);
		if (tb_doctor_read_long(d, path, &v) != 0) {
			tb_doctor_report(d, "net.rp_filter", names[i],
					 TB_DOCTOR_SKIPPED, "check the name",
					 "no %s", path);
			continue;
		}
		/* The kernel applies the larger of all and the interface. */
		if ((all > v ? all : v) == 1) {
			snprintf(fix, sizeof(fix), "sysctl -w net.ipv4.conf.%s."
				 "rp_filter=2 net.ipv4.conf.all.rp_filter=2 "
				 "(loose), in /etc/sysctl.d/ to keep it",
				 names[i]);
			tb_doctor_report(d, "net.rp_filter", names[i],
					 TB_DOCTOR_WARN, fix,
					 "strict reverse-path filter (all=%ld, "
					 "%s=%ld): multicast from a source not "
					 "routed back through %s is dropped",
					 all, names[i], v, names[i]);
		} else {
			tb_doctor_report(d, "net.rp_filter", names[i],
					 TB_DOCTOR_OK, NULL, "rp_filter %ld "
					 "(all=%ld)", v, all);
		}
		snprintf(path, sizeof(path), "/proc/sys/net/ipv4/conf/%s/"
			 "force_igmp_version", names[i]);
		tb_doctor_read_long(d, path, &force);
		snprintf(fix, sizeof(fix), "sysctl -w net.ipv4.conf.%s."
			 "force_igmp_version=0 (or 2 or 3, as the switches' "
			 "IGMP snooping wants)", names[i]);
		if (force == 1)
			tb_doctor_report(d, "net.igmp", names[i], TB_DOCTOR_WARN,
					 fix, "IGMPv1 forced: no leave messages, "
					 "switches keep sending left groups");
		else
			tb_doctor_report(d, "net.igmp", names[i], TB_DOCTOR_OK,
					 NULL, "IGMP version %s",
					 force ? (force == 2 ? "2 (forced)"
							     : "3 (forced)")
					       : "negotiated");
	}
	if (!any) {
		tb_doctor_report(d, "net.rp_filter", "", TB_DOCTOR_SKIPPED,
				 "no multicast interface to check",
				 "no RDMA netdev or udp interface");
	}
	tb_doctor_read_long(d, "/proc/sys/net/ipv4/igmp_max_memberships",
			    &maxm);
	if (groups > maxm)
		tb_doctor_report(d, "net.igmp", "memberships", TB_DOCTOR_FAIL,
				 "sysctl -w net.ipv4.igmp_max_memberships=1024",
				 "%d multicast streams, igmp_max_memberships "
				 "%ld: joins beyond it fail", groups, maxm);
}

static void rmem(tb_doctor_t *d)
{
	long max;
	uint32_t want = 0;
	const char *who = "";

	for (int i = 0; i < d->n_streams; i++)
		if (d->streams[i]->transport == TB_TRANSPORT_UDP &&
		    d->streams[i]->rcvbuf > want) {
			want = d->streams[i]->rcvbuf;
			who = d->streams[i]->name;
		}
	if (!want) {
		tb_doctor_report(d, "net.rmem_max", "", TB_DOCTOR_SKIPPED,
				 "set rcvbuf on udp streams to size their "
				 "socket buffers", d->cfg ? "no udp stream sets "
				 "rcvbuf" : "no -c FILE: no rcvbuf to check");
		return;
	}
	if (tb_doctor_read_long(d, "/proc/sys/net/core/rmem_max", &max) != 0) {
		tb_doctor_report(d, "net.rmem_max", "", TB_DOCTOR_SKIPPED,
				 "mount /proc", "cannot read "
				 "net.core.rmem_max");
		return;
	}
	if ((uint64_t)max < want) {
		char fix[160];

		snprintf(fix, sizeof(fix), "sysctl -w net.core.rmem_max=%u "
			 "(and in /etc/sysctl.d/)", want);
		tb_doctor_report(d, "net.rmem_max", "", TB_DOCTOR_FAIL, fix,
				 "net.core.rmem_max %ld < rcvbuf %u of stream "
				 "%s: the kernel caps it and bursts overflow "
				 "the socket", max, want, who);
	} else {
		tb_doctor_report(d, "net.rmem_max", "", TB_DOCTOR_OK, NULL,
				 "net.core.rmem_max %ld >= rcvbuf %u", max,
				 want);
	}
}

void tb_doctor_check_net(tb_doctor_t *d)
{
	char names[16][64];
	int n = netdevs(d, names);

	mtu(d, names, n);
	pfc_ecn(d);
	firewall(d);
	multicast(d, names, n);
	rmem(d);
}
