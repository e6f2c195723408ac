/*
 * feed_opts.c - the feed-source options (see feed_opts.h).  Set-up only.
 */
#include "tools/md/feed_opts.h"

#include "tools/cli.h"
#include "tools/md/mold.h"

#include <string.h>

void tb_feed_opts_init(tb_feed_opts_t *o)
{
	tb_feed_cfg_init(&o->cfg);
	o->cfg.group = "239.194.7.1";
	o->cfg.port = 31001;
	o->cfg.retrans_host = "127.0.0.1";
	o->cfg.first_seq = 1;
	o->cfg.max_instruments = TB_FEED_OPTS_MAX_INSTRUMENTS;
	o->retrans_port = 31002;
	o->port_b = 0;
}

int tb_feed_opts_take(tb_feed_opts_t *o, int opt, const char *arg,
		      const char **bad)
{
	tb_feed_cfg_t *c = &o->cfg;
	uint64_t v;

	switch (opt) {
	case 'g': if (!tb_cli_is_ipv4(arg)) *bad = "--group"; else c->group = arg; break;
	case 'i': if (!tb_cli_is_ipv4(arg)) *bad = "--iface"; else c->iface = arg; break;
	case 'H': if (!tb_cli_is_ipv4(arg)) *bad = "--retrans-host"; else c->retrans_host = arg; break;
	case 'S': if (!*arg || strlen(arg) > TB_MOLD_SESSION_LEN) *bad = "--session"; else c->session = arg; break;
	case 'p': if (tb_cli_u64_c(arg, &v) || v == 0 || v > 65535) *bad = "--port"; else c->port = (uint16_t)v; break;
	case 'R': if (tb_cli_u64_c(arg, &v) || v > 65535) *bad = "--retrans-port"; else o->retrans_port = v; break;
	case 'F': if (tb_cli_u64_c(arg, &v)) *bad = "--first-seq"; else c->first_seq = v; break;
	case 'G': if (tb_cli_u64_c(arg, &v) || v == 0 || v > 60000) *bad = "--gap-timeout-ms"; else c->gap_timeout_ns = v * 1000000ull; break;
	case 'Y': if (tb_cli_u64_c(arg, &v) || v > 100) *bad = "--gap-retries"; else c->gap_retries = (uint32_t)v; break;
	case 'N': if (tb_cli_u64_c(arg, &v) || v == 0 || v > TB_FEED_OPTS_MAX_INSTRUMENTS) *bad = "--instruments"; else c->max_instruments = (uint32_t)v; break;
	case TB_FEED_OPT_GROUP_B: if (!tb_cli_is_ipv4(arg)) *bad = "--group-b"; else c->group_b = arg; break;
	case TB_FEED_OPT_PORT_B: if (tb_cli_u64_c(arg, &v) || v == 0 || v > 65535) *bad = "--port-b"; else o->port_b = v; break;
	case TB_FEED_OPT_AB_WAIT: if (tb_cli_u64_c(arg, &v) || v > 10000000) *bad = "--ab-wait-us"; else c->ab_wait_ns = v * 1000ull; break;
	case TB_FEED_OPT_LINE_TIMEOUT: if (tb_cli_u64_c(arg, &v) || v == 0 || v > 600000) *bad = "--line-timeout-ms"; else c->line_timeout_ns = v * 1000000ull; break;
	default: return 0;
	}
	return 1;
}

void tb_feed_opts_usage(FILE *out)
{
	fprintf(out,
"  -g, --group ADDR         feed multicast group or local address\n"
"                           (default 239.194.7.1)\n"
"  -p, --port PORT          feed port (default 31001)\n"
"  -i, --iface ADDR         interface address to join on (default any)\n"
"  -H, --retrans-host ADDR  retransmission server (default 127.0.0.1)\n"
"  -R, --retrans-port PORT  its port, 0 = none (default 31002)\n"
"      --first-seq N        first sequence expected, 0 = late join\n"
"                           (default 1)\n"
"      --session NAME       accept only this MoldUDP64 session (default:\n"
"                           the first packet's)\n"
"      --gap-timeout-ms MS  first re-request timeout, 1..60000 (default 20)\n"
"      --gap-retries N      re-sends before giving a gap up, 0..100\n"
"                           (default 5)\n"
"      --instruments N      instruments (stock locates) 0..N-1, N <= %d\n"
"                           (default %d)\n"
"      --group-b ADDR       line B: the same feed on a second group,\n"
"                           arbitrated with line A (default: none)\n"
"      --port-b PORT        line B's port (default: line A's)\n"
"      --ab-wait-us US      a hole on one line waits this long for the\n"
"                           other before it is re-requested, 0..10000000\n"
"                           (default 2000)\n"
"      --line-timeout-ms MS a line quiet this long is reported silent,\n"
"                           1..600000 (default 500)\n",
		TB_FEED_OPTS_MAX_INSTRUMENTS, TB_FEED_OPTS_MAX_INSTRUMENTS);
}

void tb_feed_opts_done(tb_feed_opts_t *o)
{
	o->cfg.retrans_port = (uint16_t)o->retrans_port;
	if (o->retrans_port == 0)
		o->cfg.retrans_host = NULL;
	o->cfg.port_b = o->port_b ? (uint16_t)o->port_b : o->cfg.port;
}
