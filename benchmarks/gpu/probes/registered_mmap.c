#define _GNU_SOURCE
#include <cuda.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
#define CK(x) do{CUresult r=(x);if(r){printf("CUDA error %d at %s\n",r,#x);exit(1);}}while(0)
CUcontext ctx; char*M; CUdeviceptr D; size_t N, P; int T, SUM; unsigned long sink[64];
static void*w(void*a){long t=(long)a; cuCtxSetCurrent(ctx); CUstream s; cuStreamCreate(&s,CU_STREAM_NON_BLOCKING); unsigned long acc=0;
 for(size_t i=t;i*P<N;i+=T){char*p=M+i*P; CK(cuMemHostRegister(p,P,CU_MEMHOSTREGISTER_READ_ONLY)); CK(cuMemcpyHtoDAsync(D+i*P,p,P,s));
  if(SUM){const unsigned long*q=(const unsigned long*)p; for(size_t k=0;k<P/8;k+=4) acc+=q[k]^q[k+1]^(q[k+2]+q[k+3]);}
  CK(cuStreamSynchronize(s)); CK(cuMemHostUnregister(p));}
 sink[t]=acc; return 0;}
int main(){N=(size_t)2<<30; const char*path="/tmp/p3.bin";
 char*a=malloc(N); memset(a,1,N); int fd=open(path,O_CREAT|O_RDWR|O_TRUNC,0644); for(size_t o=0;o<N;o+=64<<20) if(pwrite(fd,a+o,64<<20,o)<0) return 1;
 CK(cuInit(0)); CUdevice d; CK(cuDeviceGet(&d,0)); CK(cuDevicePrimaryCtxRetain(&ctx,d)); CK(cuCtxSetCurrent(ctx)); CK(cuMemAlloc(&D,N));
 size_t Ps[]={16<<20,64<<20}; int Tsz[]={2,4,8,16};
 for(int sum=0;sum<2;sum++) for(int pi=0;pi<2;pi++) for(int ti=0;ti<4;ti++){P=Ps[pi];T=Tsz[ti];SUM=sum;
  double t0=now(); M=mmap(0,N,PROT_READ,MAP_SHARED|MAP_POPULATE,fd,0); pthread_t th[32];
  for(long i=0;i<T;i++) pthread_create(&th[i],0,w,(void*)i); for(int i=0;i<T;i++) pthread_join(th[i],0); munmap(M,N);
  printf("sum=%d piece %zu MiB T=%d: %.1f GB/s\n",sum,P>>20,T,N/(now()-t0)/1e9);}
 // plain pread->pinned with sum, pipelined with DMA (baseline of the current design)
 unlink(path); return 0;}
