"""The kunlun target's runtime side: the kernel launcher, and (loaded only where the SDK is
installed) the XPU runtime binding, its device, streams and events, and BKCL collectives."""
