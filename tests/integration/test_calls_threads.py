"""The threads of a program start and run under ulsock as without it (helper
calls_threads): the library's static TLS, which every thread's stack carries, stays small,
and its calls fit in a small stack."""

from calls_util import case_list_test, case_test

HELPER = "calls_threads"
CASES = {
    "small_stacks": "a thread with a 32 KiB stack starts; both ends of a connection on "
                    "64 KiB stacks move 1 MiB each way, blocking waits included, and "
                    "256 KiB more with sendfile",
}


test_case_list = case_list_test(HELPER, CASES)
test_threads = case_test(HELPER, CASES)
