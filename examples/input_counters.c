/* An application's own input in the counters file: a feed handler's
 * exchange line, shown by tb-stat beside the process's streams (here
 * "feed.A", of kind "mold").  Counted by the thread that reads it. */
#include <tickbus/tickbus.h>

#include <stdio.h>

int main(void)
{
	tb_input_t *line;

	if (tb_input_open(&line, 0, "feed.A", "mold") < 0) {
		fprintf(stderr, "input: %s\n", tb_errmsg());
		return 1;
	}
	for (int pkt = 0; pkt < 100; pkt++) {
		if (pkt % 10 == 0)                       /* the other line was first */
			tb_input_add(line, TB_INPUT_DUPLICATES, 12);
		else
			tb_input_add(line, TB_INPUT_DELIVERED, 12);
	}
	tb_input_add(line, TB_INPUT_ERRORS, 1);          /* it fell silent once */
	printf("feed.A: %llu messages taken, %llu came second, %llu silence\n",
	       (unsigned long long)tb_input_get(line, TB_INPUT_DELIVERED),
	       (unsigned long long)tb_input_get(line, TB_INPUT_DUPLICATES),
	       (unsigned long long)tb_input_get(line, TB_INPUT_ERRORS));
	if (tb_input_get(line, TB_INPUT_DELIVERED) != 1080 ||
	    tb_input_get(line, TB_INPUT_DUPLICATES) != 120)
		return 1;
	tb_input_close(line);
	return tb_input_open(&line, 0, "", "mold") == TB_EINVAL ? 0 : 1;
}
