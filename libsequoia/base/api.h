/* What the installed library exports, and how its headers read from C++ (docs/design.md §9.1).
 *
 * libsequoia.so is built from libraries compiled with hidden symbol visibility, so that only
 * the declarations of the public headers marked SQ_API are exported: every one of them is named
 * sq_... (or SQ_...), and nothing internal (the tools' plumbing, the corpus reader's sqc_*
 * helpers) reaches another program. The tools link the same code statically, where visibility
 * changes nothing. Every public header wraps its declarations in SQ_BEGIN_DECLS/SQ_END_DECLS,
 * so that a C++ program sees them with C linkage. Header-only, including nothing.
 *
 * SQ_API is the same when the library is built and when a program includes the header: in a
 * program it only restates that the symbol has default visibility, which is right even when
 * the program itself builds with -fvisibility=hidden. Other compilers get nothing. */
#ifndef SQ_BASE_API_H
#define SQ_BASE_API_H

#if defined(__GNUC__) || defined(__clang__)
#define SQ_API __attribute__((visibility("default")))
#else
#define SQ_API
#endif

#ifdef __cplusplus
#define SQ_BEGIN_DECLS extern "C" {
#define SQ_END_DECLS }
#else
#define SQ_BEGIN_DECLS
#define SQ_END_DECLS
#endif

#endif
