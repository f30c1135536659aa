/*
 * ulsock-bench: the readable table (stdout) and the JSON (a file, or lines on stdout).
 * A field the test does not measure is "-" in the table and absent from the JSON.
 */
#include "ub.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static FILE *json;
static int json_rows;

static const char *const names[UB_NTESTS] = {
	[UB_LATENCY] = "latency", [UB_BW] = "bw",	  [UB_BIBW] = "bibw",
	[UB_MULTISTREAM] = "multistream", [UB_HOTSPOT] = "hotspot",
	[UB_FANIN] = "fanin",	  [UB_FANOUT] = "fanout", [UB_CONNECT] = "connect",
	[UB_GANGLIA] = "ganglia", [UB_OVERHEAD] = "overhead",
};

const char *ub_test_name(enum ub_test t)
{
	return t > 0 && t < UB_NTESTS ? names[t] : "?";
}

static void json_string(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++)
		if (*s == '"' || *s == '\\')
			fprintf(f, "\\%c", *s);
		else if ((unsigned char)*s < 0x20)
			fprintf(f, "\\u%04x", *s);
		else
			fputc(*s, f);
	fputc('"', f);
}

static void json_num(FILE *f, const char *key, double v)
{
	if (!isnan(v) && !isinf(v))
		fprintf(f, ",\"%s\":%.6g", key, v);
}

static void json_row(FILE *f, const struct ub_opts *o, const struct ub_row *r)
{
	fputs("{\"test\":", f);
	json_string(f, r->test);
	fputs(",\"substrate\":", f);
	json_string(f, o->label);
	if (r->param[0]) {
		fputs(",\"op\":", f);
		json_string(f, r->param);
	}
	fprintf(f, ",\"mode\":\"%s\",\"size\":%llu,\"clients\":%d,\"count\":%llu",
		r->spin ? "spin" : "block", (unsigned long long)r->size, r->clients,
		(unsigned long long)r->count);
	json_num(f, "elapsed_s", r->elapsed_s);
	json_num(f, "lat_median_us", r->lat_med_us);
	json_num(f, "lat_p99_us", r->lat_p99_us);
	json_num(f, "lat_p999_us", r->lat_p999_us);
	json_num(f, "mb_s", r->mb_s);
	json_num(f, "msg_s", r->msg_s);
	json_num(f, "conn_s", r->conn_s);
	json_num(f, "ns_per_call", r->ns_call);
	json_num(f, "cpu_client_s", r->cpu_client_s);
	json_num(f, "cpu_server_s", r->cpu_server_s);
	json_num(f, "mb_per_cpu_s", r->mb_per_cpu_s);
	fprintf(f, ",\"bytes_sent\":%llu,\"bytes_received\":%llu,\"server_bytes_sent\":%llu,"
		   "\"server_bytes_received\":%llu,\"verified\":%s}",
		(unsigned long long)r->sent, (unsigned long long)r->received,
		(unsigned long long)r->srv_sent, (unsigned long long)r->srv_received,
		r->verified ? "true" : "false");
}

/* A number in at most 8 columns, "-" when not measured. */
static const char *cell(char *buf, size_t len, double v)
{
	if (isnan(v))
		return "-";
	if (v >= 1e7)
		snprintf(buf, len, "%.3gM", v / 1e6);
	else if (v >= 100)
		snprintf(buf, len, "%.0f", v);
	else
		snprintf(buf, len, "%.3g", v);
	return buf;
}

static const char *size_text(char *buf, size_t len, uint64_t v)
{
	if (v >= (1u << 20) && v % (1u << 20) == 0)
		snprintf(buf, len, "%lluM", (unsigned long long)(v >> 20));
	else if (v >= 1024 && v % 1024 == 0)
		snprintf(buf, len, "%lluK", (unsigned long long)(v >> 10));
	else
		snprintf(buf, len, "%llu", (unsigned long long)v);
	return buf;
}

void ub_output_begin(const struct ub_opts *o)
{
	if (o->json_file) {
		json = fopen(o->json_file, "w");
		if (!json)
			ub_die("cannot write %s", o->json_file);
		fputs("{\"tool\":\"ulsock-bench\",\"version\":1,\"substrate\":", json);
		json_string(json, o->label);
		fputs(",\"rows\":[\n", json);
	}
	if (!o->json_lines)
		printf("%-11s %-16s %5s %5s %9s %8s %8s %8s %8s %8s %8s %8s %7s %7s %8s %s\n",
		       "test", "mode/op", "size", "conns", "count", "lat_us", "p99_us",
		       "p99.9_us", "MB/s", "msg/s", "conn/s", "ns/call", "cpu_c", "cpu_s",
		       "MB/cpu-s", "ok");
}

void ub_output_rows(const struct ub_opts *o, const struct ub_row *rows, int n)
{
	char b[12][32];

	for (int i = 0; i < n; i++) {
		const struct ub_row *r = &rows[i];

		if (json) {
			fputs(json_rows++ ? ",\n" : "", json);
			json_row(json, o, r);
		}
		if (o->json_lines) {
			json_row(stdout, o, r);
			fputc('\n', stdout);
			continue;
		}
		printf("%-11s %-16s %5s %5d %9llu %8s %8s %8s %8s %8s %8s %8s %7.3f %7.3f %8s %s\n",
		       r->test, r->param[0] ? r->param : r->spin ? "spin" : "block",
		       size_text(b[0], 32, r->size), r->clients, (unsigned long long)r->count,
		       cell(b[1], 32, r->lat_med_us), cell(b[2], 32, r->lat_p99_us),
		       cell(b[3], 32, r->lat_p999_us), cell(b[4], 32, r->mb_s),
		       cell(b[5], 32, r->msg_s), cell(b[6], 32, r->conn_s),
		       cell(b[7], 32, r->ns_call), isnan(r->cpu_client_s) ? 0 : r->cpu_client_s,
		       isnan(r->cpu_server_s) ? 0 : r->cpu_server_s, cell(b[8], 32, r->mb_per_cpu_s),
		       r->verified ? "yes" : "NO");
	}
	fflush(stdout);
}

int ub_output_end(const struct ub_opts *o)
{
	(void)o;
	if (!json)
		return 0;
	fputs("\n]}\n", json);
	return fclose(json) ? -1 : 0;
}
