/* A latency the application measures, exported where tb-stat and
 * Prometheus see it: here the time from a message's publish stamp to its
 * handler, as a strategy's poll loop would record it for every message
 * (a histogram "publish_to_receive" of stream 7). */
#include <tickbus/tickbus.h>

#include <stdio.h>

int main(void)
{
	tb_latency_t *lat;

	if (tb_latency_open(&lat, 7, "publish_to_receive") < 0) {
		fprintf(stderr, "latency: %s\n", tb_errmsg());
		return 1;
	}
	for (int i = 0; i < 1000; i++) {
		uint64_t publish_ns = tb_clock_now_ns();  /* m->publish_ns */
		uint64_t receive_ns = tb_clock_now_ns();  /* m->receive_ns */

		tb_latency_record(lat, (int64_t)(receive_ns - publish_ns));
	}
	printf("publish_to_receive: %llu recorded\n",
	       (unsigned long long)tb_latency_count(lat));
	if (tb_latency_count(lat) != 1000)
		return 1;
	tb_latency_close(lat);
	return tb_latency_open(&lat, 7, "") == TB_EINVAL ? 0 : 1;
}
