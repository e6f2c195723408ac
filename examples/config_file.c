/* tb_publisher_open_file / tb_subscriber_open_file: a stream from an INI
 * file.  Usage: config_file [FILE [STREAM]] (default config/shm.ini). */
#include <tickbus/tickbus.h>

#include <stdio.h>

static void on_message(void *clientd, const tb_msg_t *m)
{
	(void)clientd;
	printf("stream %u seq %llu, %u bytes\n", m->stream_id,
	       (unsigned long long)m->seq, m->len);
}

int main(int argc, char **argv)
{
	const char *file = argc > 1 ? argv[1] : "config/shm.ini";
	const char *stream = argc > 2 ? argv[2] : "quotes";
	tb_publisher_t *pub;
	tb_subscriber_t *sub;
	tb_config_t *cfg;
	int i, n;

	/* What the file holds, stream by stream. */
	if (tb_config_load(&cfg, file) < 0) {
		fprintf(stderr, "%s\n", tb_errmsg());
		return 1;
	}
	for (i = 0; i < tb_config_stream_count(cfg); i++)
		printf("%s: stream '%s' id %u\n", file, tb_config_stream_at(cfg, i)->name,
		       tb_config_stream_at(cfg, i)->id);
	tb_config_free(cfg);

	if (tb_publisher_open_file(&pub, file, stream) < 0 ||
	    tb_subscriber_open_file(&sub, file, stream) < 0) {
		fprintf(stderr, "%s\n", tb_errmsg());
		return 1;
	}
	tb_pub_offer(pub, 1, "quote", 5);
	n = tb_sub_poll(sub, on_message, NULL, 10);
	tb_subscriber_close(sub);
	tb_publisher_close(pub);
	return n == 1 ? 0 : 1;
}
