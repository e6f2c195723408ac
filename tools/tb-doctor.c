/*
 * tb-doctor - checks this host against what tickbus and RDMA need, in the
 * order an engineer deploying on a trading host would (the README's
 * "Deploying on a trading host" walks through the same list): the RDMA
 * stack, the devices through verbs, the network, memory, cores, time.
 * Each check says ok, warn, fail or skipped, what it saw, and the command
 * or setting that fixes it (or why it was skipped).
 *
 * With -c FILE the host is judged against the configured streams (do the
 * rings fit under memlock, are their cores isolated, do their datagrams
 * fit the MTU, does the firewall let their ports through); without, the
 * checks that need streams are skipped and "no RDMA" is a warning.
 *
 * --root DIR reads /sys, /proc, /dev and command outputs (DIR/cmd/<name>)
 * from a fake tree: the tests drive every check to every verdict that way
 * (tests/doctor/roots/).  --audit lists the memory registrations of the
 * running processes instead (tools/doctor/audit.c).
 */
#include <tickbus/tickbus.h>
#include "tools/cli.h"

#include "bus/counters.h"
#include "tools/doctor/doctor.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char prog[] = "tb-doctor";

static void usage(FILE *out)
{
	fprintf(out,
"usage: tb-doctor [-c FILE] [--json] [--root DIR] [--peer-mtu N] [--no-verbs]\n"
"       tb-doctor --audit [--json] [--dir DIR]\n"
"Checks this host against what tickbus and RDMA need: the RDMA stack,\n"
"devices and ports, MTU, PFC/ECN, firewall, multicast, socket buffers,\n"
"memlock, hugepages, core isolation, IRQs, governor, THP, NUMA, TSC.\n"
"  -c, --config FILE   judge against the streams of FILE\n"
"  -j, --json          one JSON object instead of text\n"
"  -r, --root DIR      read /sys, /proc, /dev (and DIR/cmd/NAME for\n"
"                      command outputs) under DIR: a fake host\n"
"  -m, --peer-mtu N    the peer host's netdev MTU, to compare\n"
"  -V, --no-verbs      do not ask libibverbs\n"
"  -a, --audit         list the memory registrations of running processes\n"
"                      and flag any broader than its role needs\n"
"  -d, --dir DIR       with --audit: the counters directory\n"
"  -q, --quiet         text: only what is not ok\n"
"  -h, --help          this text\n"
"exit status: 0 nothing failed (audit: nothing flagged), 1 a check failed\n"
"(audit: a registration flagged), 2 usage, 3 cannot read the config\n");
}

static void print_text(const tb_doctor_t *d, int quiet)
{
	static const char *const tag[] = {"[ ok ]", "[warn]", "[FAIL]",
					  "[skip]"};
	int count[4] = {0};

	for (int i = 0; i < d->n_results; i++)
		count[d->results[i].verdict]++;
	printf("tb-doctor: %d checks: %d ok, %d warn, %d fail, %d skipped\n",
	       d->n_results, count[0], count[1], count[2], count[3]);
	for (int i = 0; i < d->n_results; i++) {
		const tb_doctor_result_t *r = &d->results[i];

		if (quiet && r->verdict == TB_DOCTOR_OK)
			continue;
		printf("%s %-18s %s\n", tag[r->verdict], r->id, r->subject);
		printf("       saw: %s\n", r->saw);
		if (r->fix[0] && r->verdict != TB_DOCTOR_OK)
			printf("       %s %s\n", r->verdict == TB_DOCTOR_SKIPPED
				? "why:" : "fix:", r->fix);
	}
}

static void json_str(const char *s)
{
	putchar('"');
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;

		if (c == '"' || c == '\\')
			printf("\\%c", c);
		else if (c < 0x20)
			printf("\\u%04x", c);
		else
			putchar(c);
	}
	putchar('"');
}

static void print_json(const tb_doctor_t *d)
{
	int count[4] = {0};

	printf("{\"checks\":[");
	for (int i = 0; i < d->n_results; i++) {
		const tb_doctor_result_t *r = &d->results[i];

		count[r->verdict]++;
		printf("%s{\"id\":", i ? "," : "");
		json_str(r->id);
		printf(",\"subject\":");
		json_str(r->subject);
		printf(",\"verdict\":\"%s\",\"saw\":",
		       tb_doctor_verdict_name(r->verdict));
		json_str(r->saw);
		printf(",\"%s\":", r->verdict == TB_DOCTOR_SKIPPED ? "why"
								  : "fix");
		json_str(r->verdict == TB_DOCTOR_OK ? "" : r->fix);
		putchar('}');
	}
	printf("],\"summary\":{\"ok\":%d,\"warn\":%d,\"fail\":%d,"
	       "\"skipped\":%d}}\n", count[0], count[1], count[2], count[3]);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{"config", required_argument, 0, 'c'},
		{"json", no_argument, 0, 'j'},
		{"root", required_argument, 0, 'r'},
		{"peer-mtu", required_argument, 0, 'm'},
		{"no-verbs", no_argument, 0, 'V'},
		{"audit", no_argument, 0, 'a'},
		{"dir", required_argument, 0, 'd'},
		{"quiet", no_argument, 0, 'q'},
		{"help", no_argument, 0, 'h'},
		{0, 0, 0, 0},
	};
	static tb_doctor_t d;
	const char *config = NULL, *dir = NULL;
	int json = 0, audit = 0, quiet = 0, c, failed = 0;
	uint64_t v;

	d.verbs = 1;
	while ((c = getopt_long(argc, argv, "c:jr:m:Vad:qh", opts, NULL)) != -1) {
		switch (c) {
		case 'c': config = optarg; break;
		case 'j': json = 1; break;
		case 'r':
			if (!optarg[0] || strlen(optarg) >= sizeof(d.root))
				return tb_cli_bad_value(prog, NULL, "--root",
							optarg);
			snprintf(d.root, sizeof(d.root), "%s", optarg);
			/* "/" is the real system: no prefix. */
			while (strlen(d.root) > 0 &&
			       d.root[strlen(d.root) - 1] == '/')
				d.root[strlen(d.root) - 1] = '\0';
			break;
		case 'm':
			if (tb_cli_u64(optarg, &v) || v < 576 || v > 65535)
				return tb_cli_usage_error(prog, NULL, "--peer-mtu "
							  "'%s' is not in "
							  "576..65535", optarg);
			d.peer_mtu = (uint32_t)v;
			break;
		case 'V': d.verbs = 0; break;
		case 'a': audit = 1; break;
		case 'd': dir = optarg; break;
		case 'q': quiet = 1; break;
		case 'h':
		default: return tb_cli_usage_exit(usage, c);
		}
	}
	if (optind < argc)
		return tb_cli_unexpected(prog, NULL, argv[optind]);
	if (dir && !audit)
		return tb_cli_usage_error(prog, NULL, "--dir goes with --audit");
	if (audit) {
		int rc;

		if (config || d.root[0] || d.peer_mtu)
			return tb_cli_usage_error(prog, NULL, "--audit takes "
						  "only --json and --dir");
		rc = tb_doctor_audit(dir, json);
		if (rc < 0) {
			fprintf(stderr, "%s: %s\n", prog, tb_errmsg());
			return 1;
		}
		return rc;
	}
	d.needs_rdma = -1;
	if (config) {
		if (tb_config_load(&d.cfg, config) < 0) {
			fprintf(stderr, "%s: %s\n", prog, tb_errmsg());
			return 3;
		}
		d.needs_rdma = 0;
		for (int i = 0; i < tb_config_stream_count(d.cfg) && d.n_streams <
		     (int)(sizeof(d.streams) / sizeof(d.streams[0])); i++) {
			const tb_stream_cfg_t *s = tb_config_stream_at(d.cfg, i);

			d.streams[d.n_streams++] = s;
			d.needs_rdma |= s->transport == TB_TRANSPORT_RC ||
					s->transport == TB_TRANSPORT_UD;
		}
	}
	d.softrdma = d.verbs && tb_doctor_verbs_is_softrdma();
	tb_doctor_check_rdma(&d);
	tb_doctor_check_verbs(&d);
	tb_doctor_check_net(&d);
	tb_doctor_check_mem(&d);
	tb_doctor_check_cpu(&d);
	tb_doctor_check_time(&d);
	if (json)
		print_json(&d);
	else
		print_text(&d, quiet);
	for (int i = 0; i < d.n_results; i++)
		failed |= d.results[i].verdict == TB_DOCTOR_FAIL;
	tb_config_free(d.cfg);
	return failed ? 1 : 0;
}
