/*
 * time.c - the clock tickbus stamps with: an invariant TSC (constant_tsc
 * and nonstop_tsc in /proc/cpuinfo), and the kernel's clocksource, which
 * must be the TSC for clock_gettime to be cheap and calibrations to hold.
 */
#include "tools/doctor/doctor.h"

#include <stdio.h>
#include <string.h>

static int has_flag(const char *flags, const char *f)
{
	size_t n = strlen(f);

	for (const char *p = strstr(flags, f); p; p = strstr(p + 1, f))
		if ((p == flags || p[-1] == ' ') && (p[n] == ' ' || p[n] == '\n' ||
						    !p[n]))
			return 1;
	return 0;
}

void tb_doctor_check_time(tb_doctor_t *d)
{
	static char cpuinfo[1 << 16];
	char cur[64], avail[256];
	const char *flags;

	if (tb_doctor_read(d, "/proc/cpuinfo", cpuinfo, sizeof(cpuinfo)) < 0 ||
	    !(flags = strstr(cpuinfo, "\nflags")) ) {
		flags = strncmp(cpuinfo, "flags", 5) ? NULL : cpuinfo;
	}
	if (!flags) {
		tb_doctor_report(d, "time.tsc", "", TB_DOCTOR_SKIPPED,
				 "not an x86 CPU, or /proc is missing",
				 "no CPU flags in /proc/cpuinfo");
	} else {
		int c = has_flag(flags, "constant_tsc"),
		    n = has_flag(flags, "nonstop_tsc");

		if (c && n)
			tb_doctor_report(d, "time.tsc", "", TB_DOCTOR_OK, NULL,
					 "invariant TSC (constant_tsc, "
					 "nonstop_tsc)");
		else
			tb_doctor_report(d, "time.tsc", "", TB_DOCTOR_WARN,
					 "use a CPU (or a VM with invariant TSC "
					 "passed through: e.g. -cpu host,"
					 "+invtsc) whose TSC is invariant; "
					 "tickbus then falls back to "
					 "clock_gettime",
					 "TSC is not invariant (constant_tsc "
					 "%s, nonstop_tsc %s): it drifts with "
					 "frequency or stops in deep sleep",
					 c ? "yes" : "no", n ? "yes" : "no");
	}
	if (tb_doctor_read(d, "/sys/devices/system/clocksource/clocksource0/"
			   "current_clocksource", cur, sizeof(cur)) < 0) {
		tb_doctor_report(d, "time.clocksource", "", TB_DOCTOR_SKIPPED,
				 "mount /sys", "cannot read the clocksource");
		return;
	}
	if (!strcmp(cur, "tsc")) {
		tb_doctor_report(d, "time.clocksource", "", TB_DOCTOR_OK, NULL,
				 "clocksource tsc");
		return;
	}
	if (tb_doctor_read(d, "/sys/devices/system/clocksource/clocksource0/"
			   "available_clocksource", avail, sizeof(avail)) < 0)
		avail[0] = '\0';
	tb_doctor_report(d, "time.clocksource", "", TB_DOCTOR_WARN,
			 has_flag(avail, "tsc")
			 ? "echo tsc > /sys/devices/system/clocksource/"
			   "clocksource0/current_clocksource (and "
			   "clocksource=tsc tsc=reliable on the kernel "
			   "command line)"
			 : "the kernel has marked the TSC unstable (dmesg | "
			   "grep -i tsc); fix the BIOS or VM settings",
			 "clocksource %s (available: %s): clock_gettime costs "
			 "a device read", cur, avail[0] ? avail : "?");
}
