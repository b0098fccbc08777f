/* MIG capability files written with each instance (caps.c). ci < 0: the GPU instance's own. */
#ifndef FAKEGPU_CAPS_H
#define FAKEGPU_CAPS_H

/* the nvidia-caps minor of a GPU instance; its compute instance c has this + 1 + c */
unsigned int fg_caps_gi_minor(unsigned int gpu_minor, unsigned int gi);
void fg_caps_write(unsigned int gpu_minor, unsigned int gi, int ci);
void fg_caps_remove(unsigned int gpu_minor, unsigned int gi, int ci);

#endif
