/* MIG capability files written with each instance (caps.c). ci < 0: the GPU instance's own. */
#ifndef FAKEGPU_CAPS_H
#define FAKEGPU_CAPS_H

void fg_caps_write(unsigned int gpu_minor, unsigned int gi, int ci);
void fg_caps_remove(unsigned int gpu_minor, unsigned int gi, int ci);

#endif
