/*
 * fuzz_config.c - libFuzzer target for the config loader (bus/config.c):
 * the input is the text of a config file, parsed by
 * tb_config_load_buffer() exactly as tb_config_load() parses what it read.
 *
 * What it asserts, beyond "no crash, no sanitizer report":
 *   - a load either succeeds or fails with TB_ECONFIG (TB_ENOMEM aside),
 *     never anything else, and leaves *out NULL when it fails;
 *   - a failure's message names the file and is safe to print: no control
 *     character, no DEL, no C1 control, only well-formed UTF-8 (but for a
 *     character cut by the message buffer's end), whatever bytes the input
 *     holds;
 *   - every stream of a file that loads validates on its own
 *     (tb_stream_cfg_validate), is found again by its name, and no two
 *     share a name or an id.
 * The input, cut at its first NUL and at 255 bytes, is also parsed as an
 * endpoint (tb_config_endpoint_parse), which command lines use too.
 */
#include "bus/config.h"
#include "bus/error.h"
#include "tests/fuzz/fuzz_util.h"

#include <stdlib.h>
#include <string.h>

#define NAME "fuzz.ini"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	tb_config_t *cfg = (tb_config_t *)&cfg;
	tb_endpoint_t ep;
	char text[256];
	int rc, n;

	rc = tb_config_load_buffer(&cfg, NAME, data, size);
	if (rc != 0) {
		if ((rc != TB_ECONFIG && rc != TB_ENOMEM) || cfg != NULL)
			abort();
		if (strncmp(tb_errmsg(), NAME, strlen(NAME)) != 0 ||
		    !fuzz_text_safe(tb_errmsg()))
			abort();
	} else {
		n = tb_config_stream_count(cfg);
		if (n < 1)
			abort();
		for (int i = 0; i < n; i++) {
			const tb_stream_cfg_t *s = tb_config_stream_at(cfg, i);

			if (!s || tb_stream_cfg_validate(s) != 0 ||
			    tb_config_stream(cfg, s->name) != s)
				abort();
			for (int j = 0; j < i; j++) {
				const tb_stream_cfg_t *o = tb_config_stream_at(cfg, j);

				if (o->id == s->id || !strcmp(o->name, s->name))
					abort();
			}
		}
		tb_config_free(cfg);
	}

	n = (int)(size < sizeof(text) - 1 ? size : sizeof(text) - 1);
	memcpy(text, data, (size_t)n);
	text[n] = '\0';
	rc = tb_config_endpoint_parse(&ep, text);
	if (rc != 0 && (rc != TB_ECONFIG || !fuzz_text_safe(tb_errmsg())))
		abort();
	if (rc == 0 && (ep.port == 0 || !memchr(ep.host, '\0', sizeof(ep.host))))
		abort();
	return 0;
}
