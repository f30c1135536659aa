/* SPDX-License-Identifier: MIT */
/*
 * The transport table: every transport but kernel TCP, one line each, in the order the
 * core asks them to take a new connection (core/transport.h). The first to answer
 * ULS_TP_TAKEN or ULS_TP_DECLINED decides. NAME's folder defines uls_NAME_transport.
 */
ULS_TRANSPORT(shm)
ULS_TRANSPORT(fabric)
