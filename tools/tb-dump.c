/*
 * tb-dump - prints the messages of a stream decoded through the market-data
 * schema (schema/tickbus.xml), one line each, as text or as JSON lines:
 * live from a stream through the public subscriber API, or from a
 * retransmit store directory written by tb-recoveryd.
 *
 * A message the schema cannot decode (another schema, a truncated block, a
 * group past the end, an unknown template) is printed as an error line with
 * the decoder's reason and counted; the dump goes on.  Losses reported by
 * the subscriber (gaps, laps) are printed in line, where they happened.
 */
#include <tickbus/tickbus.h>
#include "tools/cli.h"

#include "bus/frame.h"
#include "bus/recovery/store.h"
#include "tickbus_schema.h"

#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Big enough for the largest message this schema prints: a BookLevelUpdate
 * of 65535 levels would not fit, so longer output is cut and marked. */
#define LINE_MAX_BYTES (256u << 10)
#define READ_BATCH 256

static const char prog[] = "tb-dump";
static volatile sig_atomic_t stop;

struct dump {
	int json;
	uint64_t count;       /* stop after this many; 0 = no limit */
	uint64_t printed, undecodable, lost;
	char *line;
};

static void usage(FILE *out)
{
	fprintf(out,
"usage: tb-dump -c FILE -s STREAM [options]\n"
"       tb-dump --store DIR --stream-id ID [--epoch E] [--from SEQ] [options]\n"
"Prints a stream's messages decoded through the market-data schema, one per\n"
"line, live from a stream or from a retransmit store:\n"
"  seq=N stream=S publish_ns=T Quote instrumentId=7 bidPx=101.250000000 ...\n"
"  {\"seq\":N,\"stream\":S,\"publishNs\":T,\"msg\":{\"type\":\"Quote\",...}}\n"
"A message the schema cannot decode prints error=\"why\"; a loss prints\n"
"\"gap first=A last=B\" ({\"gap\":{\"first\":A,\"last\":B}}).  A summary goes to\n"
"stderr at the end.\n"
"options:\n"
"  -c, --config FILE     stream configuration file (INI)\n"
"  -s, --stream NAME     stream to read in that file (live)\n"
"      --store DIR       read the retransmit store under DIR instead\n"
"      --stream-id ID    the stream's id in the store (required with --store)\n"
"      --epoch E         the publisher epoch to read (default: the newest)\n"
"      --from SEQ        first sequence to print (default: the first stored)\n"
"  -n, --count N         stop after N messages\n"
"  -j, --json            JSON lines instead of text\n"
"      --timeout-ms MS   live: give up after MS milliseconds (exit 4)\n"
"  -h, --help            this text\n"
"exit status: 0 done (count reached, stream closed, end of the store),\n"
"1 error, 2 usage, 3 publisher died, 4 timeout\n");
}

/* Prints one message; the payload is untrusted. */
static void print_msg(struct dump *d, uint64_t seq, uint32_t stream_id,
		      uint16_t template_id, uint64_t publish_ns, int replay,
		      const void *data, uint32_t len)
{
	tb_md_message_header_t h;
	const char *err = NULL;
	int n;

	n = tb_md_format(data, len, d->json, d->line, LINE_MAX_BYTES);
	if (n >= 0 && tb_md_header_decode(data, len, &h) >= 0 &&
	    h.template_id != template_id)
		err = "the frame's template id differs from the message's";
	else if (n < 0)
		err = tb_md_strerror(n);
	if (d->json) {
		printf("{\"seq\":%" PRIu64 ",\"stream\":%" PRIu32 ",\"publishNs\":%"
		       PRIu64 "%s", seq, stream_id, publish_ns,
		       replay ? ",\"replay\":true" : "");
		if (err)
			printf(",\"template\":%u,\"len\":%" PRIu32 ",\"error\":\"%s\"}\n",
			       template_id, len, err);
		else
			printf(",\"msg\":%s%s}\n", d->line,
			       n >= (int)LINE_MAX_BYTES ? ",\"truncated\":true" : "");
	} else {
		printf("seq=%" PRIu64 " stream=%" PRIu32 " publish_ns=%" PRIu64 "%s ",
		       seq, stream_id, publish_ns, replay ? " replay" : "");
		if (err)
			printf("template=%u len=%" PRIu32 " error=\"%s\"\n",
			       template_id, len, err);
		else
			printf("%s%s\n", d->line,
			       n >= (int)LINE_MAX_BYTES ? " ...(truncated)" : "");
	}
	if (err)
		d->undecodable++;
	d->printed++;
}

static void print_gap(struct dump *d, uint64_t first, uint64_t last)
{
	if (d->json)
		printf("{\"gap\":{\"first\":%" PRIu64 ",\"last\":%" PRIu64 "}}\n",
		       first, last);
	else
		printf("gap first=%" PRIu64 " last=%" PRIu64 "\n", first, last);
	d->lost += last - first + 1;
}

static int done(const struct dump *d)
{
	return d->count && d->printed >= d->count;
}

/* ------------------------------------------------------------------ live */

static void on_msg(void *clientd, const tb_msg_t *m)
{
	struct dump *d = clientd;

	if (done(d))
		return;
	print_msg(d, m->seq, m->stream_id, m->template_id, m->publish_ns,
		  (m->flags & TB_MSG_F_REPLAY) != 0, m->data, m->len);
}

static int dump_live(struct dump *d, const char *config, const char *stream,
		     uint64_t timeout_ms, const char **end)
{
	uint64_t start = tb_clock_mono_ms();
	tb_subscriber_t *sub;
	tb_idle_t idle;
	int rc, status = 0;

	rc = tb_subscriber_open_file(&sub, config, stream);
	if (rc < 0) {
		fprintf(stderr, "tb-dump: %s\n  (%s)\n", tb_errmsg(), tb_strerror(rc));
		return 1;
	}
	fprintf(stderr, "tb-dump: reading stream '%s' of %s\n", stream, config);
	setvbuf(stdout, NULL, _IOLBF, 0);
	tb_idle_init(&idle, TB_IDLE_SPIN_YIELD);
	*end = "signal";
	while (!stop) {
		/* Poll no more than are still wanted: --count is exact. */
		uint64_t want = d->count ? d->count - d->printed : READ_BATCH;
		int n = tb_sub_poll(sub, on_msg, d, want < READ_BATCH ? (int)want
								       : READ_BATCH);

		if (n == TB_LAPPED || n == TB_GAP) {
			uint64_t a, b;

			if (tb_sub_loss(sub, &a, &b) == 0)
				print_gap(d, a, b);
		} else if (n == TB_CLOSED) {
			*end = "closed";
			break;
		} else if (n == TB_PUBLISHER_DEAD) {
			*end = "dead";
			status = 3;
			break;
		} else if (n < 0 && n != TB_NOT_CONNECTED && n != TB_NEW_EPOCH) {
			fprintf(stderr, "tb-dump: poll: %s\n", tb_strerror(n));
			*end = "error";
			status = 1;
			break;
		}
		if (done(d)) {
			*end = "count";
			break;
		}
		tb_idle_step(&idle, n > 0 ? n : 0);
		if (n <= 0 && timeout_ms && tb_clock_mono_ms() - start > timeout_ms) {
			*end = "timeout";
			status = 4;
			break;
		}
	}
	tb_subscriber_close(sub);
	return status;
}

/* ----------------------------------------------------------------- store */

static int on_frame(void *clientd, const tb_frame_hdr_t *f)
{
	struct dump *d = clientd;

	if (f->type == TB_FRAME_DATA)
		print_msg(d, f->seq, f->stream_id, f->template_id, f->publish_ns,
			  (f->flags & TB_FRAME_F_REPLAY) != 0,
			  (const uint8_t *)f + TB_FRAME_HDR_LEN,
			  f->length - TB_FRAME_HDR_LEN);
	return done(d) || stop;
}

static int dump_store(struct dump *d, const char *dir, uint64_t stream_id,
		      uint64_t epoch, int have_epoch, uint64_t from,
		      const char **end)
{
	tb_store_cfg_t cfg;
	tb_store_t *s;
	uint64_t next;
	int rc;

	if (!have_epoch) {
		uint64_t epochs[64];
		int n = tb_store_epochs(dir, (uint32_t)stream_id, epochs, 64);

		if (n < 0) {
			fprintf(stderr, "tb-dump: %s\n", tb_errmsg());
			return 1;
		}
		if (n == 0) {
			fprintf(stderr, "tb-dump: no epoch of stream %" PRIu64
				" is stored under %s\n", stream_id, dir);
			return 1;
		}
		epoch = epochs[(n < 64 ? n : 64) - 1];
		if (n > 64) {
			/* More than fit: the listing is ascending, ask again
			 * for the tail. */
			uint64_t *all = calloc((size_t)n, sizeof(*all));

			if (!all || tb_store_epochs(dir, (uint32_t)stream_id, all,
						    (size_t)n) < n) {
				free(all);
				fprintf(stderr, "tb-dump: cannot list the epochs\n");
				return 1;
			}
			epoch = all[n - 1];
			free(all);
		}
	}
	tb_store_cfg_init(&cfg);
	if (strlen(dir) >= sizeof(cfg.dir)) {
		fprintf(stderr, "tb-dump: store path longer than %zu bytes\n",
			sizeof(cfg.dir) - 1);
		return 1;
	}
	snprintf(cfg.dir, sizeof(cfg.dir), "%s", dir);
	cfg.stream_id = (uint32_t)stream_id;
	cfg.epoch = epoch;
	cfg.read_only = 1;
	rc = tb_store_open(&s, &cfg);
	if (rc < 0) {
		fprintf(stderr, "tb-dump: %s\n  (%s)\n", tb_errmsg(), tb_strerror(rc));
		return 1;
	}
	fprintf(stderr, "tb-dump: store %s stream %" PRIu64 " epoch %" PRIu64
		": sequences %" PRIu64 "..%" PRIu64 "\n", dir, stream_id, epoch,
		tb_store_first_seq(s), tb_store_last_seq(s));
	next = from ? from : tb_store_first_seq(s);
	*end = "store";
	rc = 0;
	if (tb_store_last_seq(s) != 0 && next > tb_store_last_seq(s)) {
		fprintf(stderr, "tb-dump: --from %" PRIu64 " is after the last "
			"stored sequence %" PRIu64 "\n", next, tb_store_last_seq(s));
		rc = TB_EINVAL;
	}
	while (rc == 0 && !stop && !done(d) && next <= tb_store_last_seq(s)) {
		uint64_t a, b;

		rc = tb_store_read(s, next, READ_BATCH, on_frame, d);
		/* Records lost to damage: a gap, like a live stream's, and
		 * the dump goes on after it. */
		if (rc == TB_STORE_LOST && tb_store_lost(s, next, &a, &b)) {
			print_gap(d, next, b);
			next = b + 1;
			rc = 0;
			continue;
		}
		if (rc < 0) {
			fprintf(stderr, "tb-dump: %s\n  (%s)\n", tb_errmsg(),
				rc == TB_STORE_TOO_OLD ? "too old" :
				rc == TB_STORE_NOT_YET ? "not stored yet" :
				tb_strerror(rc));
			break;
		}
		next += (uint64_t)rc;
		rc = 0;
	}
	if (done(d))
		*end = "count";
	tb_store_close(s);
	return rc < 0 ? 1 : 0;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{"config", required_argument, 0, 'c'},
		{"stream", required_argument, 0, 's'},
		{"store", required_argument, 0, 'S'},
		{"stream-id", required_argument, 0, 'I'},
		{"epoch", required_argument, 0, 'E'},
		{"from", required_argument, 0, 'F'},
		{"count", required_argument, 0, 'n'},
		{"json", no_argument, 0, 'j'},
		{"timeout-ms", required_argument, 0, 'T'},
		{"help", no_argument, 0, 'h'},
		{0, 0, 0, 0},
	};
	const char *config = NULL, *stream = NULL, *store = NULL, *end = "";
	uint64_t stream_id = 0, epoch = 0, from = 0, timeout_ms = 0;
	int have_epoch = 0, c, status;
	struct dump d;

	memset(&d, 0, sizeof(d));
	while ((c = getopt_long(argc, argv, "c:s:n:jh", opts, NULL)) != -1) {
		uint64_t *v = NULL;

		switch (c) {
		case 'c': config = optarg; break;
		case 's': stream = optarg; break;
		case 'S': store = optarg; break;
		case 'I': v = &stream_id; break;
		case 'E': v = &epoch; have_epoch = 1; break;
		case 'F': v = &from; break;
		case 'n': v = &d.count; break;
		case 'T': v = &timeout_ms; break;
		case 'j': d.json = 1; break;
		case 'h':
		default: return tb_cli_usage_exit(usage, c);
		}
		if (v && tb_cli_u64(optarg, v) != 0)
			return tb_cli_usage_error(prog, NULL, "--%s '%s': expected "
						  "a non-negative integer",
						  c == 'I' ? "stream-id" :
						  c == 'E' ? "epoch" :
						  c == 'F' ? "from" :
						  c == 'n' ? "count" :
						  "timeout-ms", optarg);
	}
	if (optind < argc)
		return tb_cli_unexpected(prog, usage, argv[optind]);
	if (store ? (config || stream || stream_id == 0 ||
		     stream_id > UINT32_MAX || timeout_ms)
		  : (!config || !stream || stream_id || have_epoch || from))
		return tb_cli_usage_error(prog, usage, "give either -c FILE -s "
					  "STREAM, or --store DIR --stream-id "
					  "ID (1..4294967295)");
	d.line = malloc(LINE_MAX_BYTES);
	if (!d.line) {
		fprintf(stderr, "tb-dump: out of memory\n");
		return 1;
	}
	tb_cli_on_stop_signals(&stop);

	if (store)
		status = dump_store(&d, store, stream_id, epoch, have_epoch, from,
				    &end);
	else
		status = dump_live(&d, config, stream, timeout_ms, &end);
	fflush(stdout);
	fprintf(stderr, "tb-dump: printed=%" PRIu64 " undecodable=%" PRIu64
		" lost=%" PRIu64 " end=%s\n", d.printed, d.undecodable, d.lost,
		end);
	free(d.line);
	return status;
}
