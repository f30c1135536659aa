/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for the `ulsock stat` reader: what the command reads from another
 * process's record file (include/ulsock/stat.h), which any program of the user can write.
 * The reader's functions are static in src/cli/ulsock.c; this file compiles that very
 * source (its main renamed) and calls stat_file() on a file laid out from the input, in
 * both output modes.
 *
 * Input layout (little-endian):
 *   u8  flags      bit 0: --json; bit 1: the file's size is off by the next byte
 *   u8  delta      that offset, as a signed byte
 *   32 bytes       the file's header (magic, version, rec_size, pid, nslots, reserved)
 *   then records: u16 slot, 184 bytes written at that slot (the last one may be short)
 *
 * A header that is not the current layout exactly (size included) lists nothing, and is
 * named on stderr when its magic says it is a record file; a valid one lists exactly its
 * records in use. Whatever the records hold, the text mode prints one line per record
 * without control characters, and --json prints valid JSON (UTF-8, every string escaped).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

int uls_cli_main(int argc, char **argv);
#define main uls_cli_main
#include "cli/ulsock.c"
#undef main

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FILE_SIZE sizeof(struct ulsock_stat_file)
#define HEAD_SIZE offsetof(struct ulsock_stat_file, rec)
#define REC_SIZE sizeof(struct ulsock_stat_rec)

static void must(int ok, const char *expr, int line)
{
	if (!ok) {
		fprintf(stderr, "fuzz_stat.c:%d: assertion failed: %s\n", line, expr);
		abort();
	}
}

#define FUZZ_ASSERT(c) must(!!(c), #c, __LINE__)

static int rec_fd = -1, out_fd = -1, err_fd = -1;
static char rec_path[64];
static FILE *out_file, *err_file;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	rec_fd = memfd_create("fuzz-stat-records", MFD_CLOEXEC);
	out_fd = memfd_create("fuzz-stat-out", MFD_CLOEXEC);
	err_fd = memfd_create("fuzz-stat-err", MFD_CLOEXEC);
	if (rec_fd < 0 || out_fd < 0 || err_fd < 0)
		abort();
	snprintf(rec_path, sizeof(rec_path), "/proc/self/fd/%d", rec_fd);
	out_file = fdopen(out_fd, "w+");
	err_file = fdopen(err_fd, "w+");
	if (!out_file || !err_file)
		abort();
	return 0;
}

/* What a stream printed, NUL-terminated; the caller frees it. */
static char *take(FILE *f, size_t *len)
{
	fflush(f);
	long n = ftell(f);
	char *buf = malloc((size_t)n + 1);

	FUZZ_ASSERT(n >= 0 && buf != NULL);
	FUZZ_ASSERT(pread(fileno(f), buf, (size_t)n, 0) == n);
	buf[n] = '\0';
	*len = (size_t)n;
	rewind(f);
	FUZZ_ASSERT(ftruncate(fileno(f), 0) == 0);
	return buf;
}

/* ---- a small strict checker: UTF-8, JSON ---- */

/* Length of the UTF-8 sequence at p (at most n bytes), 0 when it is not one. */
static size_t utf8_len(const unsigned char *p, size_t n)
{
	size_t k = p[0] < 0x80 ? 1 : (p[0] & 0xe0) == 0xc0 ? 2 : (p[0] & 0xf0) == 0xe0 ? 3
		   : (p[0] & 0xf8) == 0xf0 ? 4 : 0;
	uint32_t cp;

	if (!k || k > n)
		return 0;
	cp = k == 1 ? p[0] : (uint32_t)(p[0] & (0x7f >> k));
	for (size_t i = 1; i < k; i++) {
		if ((p[i] & 0xc0) != 0x80)
			return 0;
		cp = cp << 6 | (p[i] & 0x3f);
	}
	/* Shortest form only, no surrogates, nothing past U+10FFFF. */
	if ((k == 2 && cp < 0x80) || (k == 3 && cp < 0x800) || (k == 4 && cp < 0x10000) ||
	    (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff)
		return 0;
	return k;
}

static int utf8_valid(const char *s, size_t n)
{
	for (size_t i = 0, k; i < n; i += k)
		if (!(k = utf8_len((const unsigned char *)s + i, n - i)))
			return 0;
	return 1;
}

struct json {
	const char *p, *end;
	int depth;
};

static void json_ws(struct json *j)
{
	while (j->p < j->end && strchr(" \t\n\r", *j->p))
		j->p++;
}

static int json_value(struct json *j);

static int json_string(struct json *j)
{
	if (j->p >= j->end || *j->p++ != '"')
		return 0;
	while (j->p < j->end && *j->p != '"') {
		unsigned char ch = (unsigned char)*j->p;
		if (ch < 0x20)
			return 0;
		if (ch != '\\') {
			size_t k = utf8_len((const unsigned char *)j->p, (size_t)(j->end - j->p));
			if (!k)
				return 0;
			j->p += k;
			continue;
		}
		if (++j->p >= j->end)
			return 0;
		if (*j->p == 'u') {
			for (int i = 1; i <= 4; i++)
				if (j->p + i >= j->end || !j->p[i] ||
				    !strchr("0123456789abcdefABCDEF", j->p[i]))
					return 0;
			j->p += 5;
		} else if (*j->p && strchr("\"\\/bfnrt", *j->p)) {
			j->p++;
		} else {
			return 0;
		}
	}
	return j->p < j->end && *j->p++ == '"';
}

static int json_number(struct json *j)
{
	const char *start = j->p;

	if (j->p < j->end && *j->p == '-')
		j->p++;
	while (j->p < j->end && *j->p >= '0' && *j->p <= '9')
		j->p++;
	return j->p > start && j->p[-1] != '-';
}

/* An object or an array: members (key: value) or values, separated by commas. */
static int json_members(struct json *j, char close, int keyed)
{
	json_ws(j);
	if (j->p < j->end && *j->p == close) {
		j->p++;
		return 1;
	}
	for (;;) {
		json_ws(j);
		if (keyed) {
			if (!json_string(j))
				return 0;
			json_ws(j);
			if (j->p >= j->end || *j->p++ != ':')
				return 0;
		}
		if (!json_value(j))
			return 0;
		json_ws(j);
		if (j->p >= j->end)
			return 0;
		if (*j->p == close) {
			j->p++;
			return 1;
		}
		if (*j->p++ != ',')
			return 0;
	}
}

static int json_value(struct json *j)
{
	int ok;

	json_ws(j);
	if (j->p >= j->end || ++j->depth > 8)
		return 0;
	if (*j->p == '{' || *j->p == '[') {
		char open = *j->p++;
		ok = json_members(j, open == '{' ? '}' : ']', open == '{');
	} else if (*j->p == '"') {
		ok = json_string(j);
	} else {
		ok = json_number(j);
	}
	j->depth--;
	return ok;
}

/* ---- the target ---- */

/* The header's fields, at the offsets stat.h pins. */
struct head {
	uint64_t magic;
	uint32_t version, rec_size, pid, nslots;
};

static void head_parse(struct head *h, const uint8_t *p)
{
	memcpy(&h->magic, p + offsetof(struct ulsock_stat_file, magic), 8);
	memcpy(&h->version, p + offsetof(struct ulsock_stat_file, version), 4);
	memcpy(&h->rec_size, p + offsetof(struct ulsock_stat_file, rec_size), 4);
	memcpy(&h->pid, p + offsetof(struct ulsock_stat_file, pid), 4);
	memcpy(&h->nslots, p + offsetof(struct ulsock_stat_file, nslots), 4);
}

static int head_current(const struct head *h, size_t file_size)
{
	return h->magic == ULSOCK_STAT_MAGIC && h->version == ULSOCK_STAT_VERSION &&
	       h->rec_size == REC_SIZE && h->nslots == ULSOCK_STAT_SLOTS && file_size == FILE_SIZE;
}

/* The text table: one line per record, no control character in any. */
static void check_text(const char *out, size_t len, unsigned records, uint32_t pid)
{
	unsigned lines = 0;

	FUZZ_ASSERT(len == 0 || out[len - 1] == '\n');
	for (size_t i = 0; i < len; i++) {
		unsigned char ch = (unsigned char)out[i];
		if (ch == '\n') {
			lines++;
			continue;
		}
		FUZZ_ASSERT(ch >= 0x20 && ch != 0x7f);
	}
	FUZZ_ASSERT(lines == records);
	FUZZ_ASSERT(utf8_valid(out, len));
	for (const char *l = out; l < out + len; l = strchr(l, '\n') + 1)
		FUZZ_ASSERT((uint32_t)strtoul(l, NULL, 10) == pid);
}

/* --json: the records as the array `ulsock stat --json` prints around them. */
static void check_json(const char *out, size_t len, unsigned records)
{
	size_t n = len + 4;
	char *doc = malloc(n);
	unsigned objects = 0;

	FUZZ_ASSERT(doc != NULL);
	doc[0] = '[';
	memcpy(doc + 1, out, len);
	memcpy(doc + 1 + len, "\n]\n", 3);
	struct json j = {doc, doc + n - 1, 0};
	FUZZ_ASSERT(json_value(&j));
	json_ws(&j);
	FUZZ_ASSERT(j.p == j.end);
	FUZZ_ASSERT(utf8_valid(doc, n - 1));
	/* Each record is one object: "  {" opens it at the start of a line. */
	for (const char *p = out; (p = strstr(p, "\n  {\"pid\": ")) != NULL; p++)
		objects++;
	FUZZ_ASSERT(objects == records);
	free(doc);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct head head;
	size_t file_size = FILE_SIZE, out_len, err_len;
	unsigned records = 0;
	int json, first = 1;

	if (size < 2 + HEAD_SIZE)
		return 0;
	json = data[0] & 1;
	if (data[0] & 2)
		file_size += (size_t)(ssize_t)(int8_t)data[1];
	head_parse(&head, data + 2);
	FUZZ_ASSERT(ftruncate(rec_fd, 0) == 0 && ftruncate(rec_fd, (off_t)file_size) == 0);
	FUZZ_ASSERT(pwrite(rec_fd, data + 2, HEAD_SIZE, 0) == (ssize_t)HEAD_SIZE);
	/* Records: the last write to a slot is what the file holds. */
	static uint8_t used[ULSOCK_STAT_SLOTS];
	memset(used, 0, sizeof(used));
	for (size_t i = 2 + HEAD_SIZE; i + 2 < size; i += 2 + REC_SIZE) {
		unsigned slot = (unsigned)(data[i] | data[i + 1] << 8) % ULSOCK_STAT_SLOTS;
		size_t n = size - i - 2 < REC_SIZE ? size - i - 2 : REC_SIZE;
		uint8_t rec[REC_SIZE] = {0};
		memcpy(rec, data + i + 2, n);
		off_t at = (off_t)(HEAD_SIZE + slot * REC_SIZE);
		if ((size_t)at + REC_SIZE > file_size)
			continue;
		FUZZ_ASSERT(pwrite(rec_fd, rec, REC_SIZE, at) == (ssize_t)REC_SIZE);
		used[slot] = rec[0] | rec[1] | rec[2] | rec[3];
	}
	for (unsigned i = 0; i < ULSOCK_STAT_SLOTS; i++)
		records += used[i] != 0;

	FILE *real_out = stdout, *real_err = stderr;
	stdout = out_file;
	stderr = err_file;
	stat_file(rec_path, "4242", json, &first);
	stdout = real_out;
	stderr = real_err;
	char *out = take(out_file, &out_len), *err = take(err_file, &err_len);

	int magic = head.magic == ULSOCK_STAT_MAGIC;
	if (!head_current(&head, file_size)) {
		/* Nothing listed; a record file of another layout is named. */
		FUZZ_ASSERT(out_len == 0 && first == 1);
		FUZZ_ASSERT(!magic == !strstr(err, "process 4242 keeps its records in another "
						    "layout"));
	} else if (json) {
		FUZZ_ASSERT(err_len == 0);
		check_json(out, out_len, records);
	} else {
		FUZZ_ASSERT(err_len == 0);
		check_text(out, out_len, records, head.pid);
	}
	free(out);
	free(err);
	return 0;
}
