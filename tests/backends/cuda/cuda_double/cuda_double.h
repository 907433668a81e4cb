/* The driver double's kernel handle (cuda_double.c): a CUfunction is a pointer to one of these, made by
   the program that drives the double; the double reads its name and runs `host` at each launch. */
#ifndef MNEME_CUDA_DOUBLE_H
#define MNEME_CUDA_DOUBLE_H

struct double_kernel {
    const char *name;
    int params;                  /* each 8 bytes */
    void (*host)(void **params); /* what a launch runs; NULL: nothing */
};

#endif
