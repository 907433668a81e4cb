// Host-side fundamentals of the GPU VM: memory, page cache, pinned copies. Built there with gcc.
#define _GNU_SOURCE
#include <cuda.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
typedef struct {char*dst;char*src;size_t n;int fd;off_t off;int mode;} job;
static void*work(void*p){job*j=p;size_t piece=1<<20;
 if(j->mode==0) memcpy(j->dst,j->src,j->n);
 else if(j->mode==1){for(size_t o=0;o<j->n;o+=piece){size_t k=j->n-o<piece?j->n-o:piece; if(pread(j->fd,j->dst+o,k,j->off+o)!=(ssize_t)k){perror("pread");}}}
 else if(j->mode==2){for(size_t o=0;o<j->n;o+=piece){size_t k=j->n-o<piece?j->n-o:piece; if(pwrite(j->fd,j->src+o,k,j->off+o)!=(ssize_t)k){perror("pwrite");}}}
 else if(j->mode==3){volatile unsigned long s=0; unsigned long*q=(unsigned long*)j->src; for(size_t i=0;i<j->n/8;i++) s+=q[i];}
 return 0;}
static double par(int mode,int T,char*dst,char*src,size_t n,int fd){pthread_t th[64];job js[64];double t0=now();size_t per=n/T;
 for(int i=0;i<T;i++){js[i]=(job){dst+i*per,src+i*per,per,fd,(off_t)(i*per),mode};pthread_create(&th[i],0,work,&js[i]);}
 for(int i=0;i<T;i++)pthread_join(th[i],0);return n/(now()-t0)/1e9;}
#define CK(x) do{CUresult r=(x);if(r){printf("CUDA error %d at %s\n",r,#x);exit(1);}}while(0)
int main(int argc,char**argv){size_t n=(size_t)2<<30; int Ts[]={1,2,4,8,16};
 double t0=now(); char*a=malloc(n); memset(a,1,n); printf("fresh touch 2GiB: %.2f GB/s\n",n/(now()-t0)/1e9);
 t0=now(); char*b=malloc(n); memset(b,2,n); printf("fresh touch 2GiB again: %.2f GB/s\n",n/(now()-t0)/1e9);
 t0=now(); memset(b,3,n); printf("memset warm: %.2f GB/s\n",n/(now()-t0)/1e9);
 for(int i=0;i<5;i++) printf("memcpy T=%d: %.1f GB/s\n",Ts[i],par(0,Ts[i],b,a,n,0));
 for(int i=0;i<5;i++) printf("read-sum T=%d: %.1f GB/s\n",Ts[i],par(3,Ts[i],b,a,n,0));
 const char*path=argc>1?argv[1]:"/tmp/probe.bin";
 for(int T=1;T<=16;T*=4){unlink(path);int fd=open(path,O_CREAT|O_RDWR,0644); printf("pwrite fresh file T=%d: %.1f GB/s\n",T,par(2,T,0,a,n,fd)); close(fd);}
 int fd=open(path,O_RDONLY);
 for(int i=0;i<5;i++) printf("pread pagecache->warm T=%d: %.1f GB/s\n",Ts[i],par(1,Ts[i],b,0,n,fd));
 CK(cuInit(0)); CUdevice d; CK(cuDeviceGet(&d,0)); CUcontext c; CK(cuDevicePrimaryCtxRetain(&c,d)); CK(cuCtxSetCurrent(c));
 void*h; t0=now(); CK(cuMemHostAlloc(&h,n,0)); printf("cuMemHostAlloc 2GiB: %.3f s\n",now()-t0);
 t0=now(); memset(h,4,n); printf("touch pinned: %.2f GB/s\n",n/(now()-t0)/1e9);
 CUdeviceptr dp; CK(cuMemAlloc(&dp,n));
 for(int r=0;r<3;r++){t0=now(); CK(cuMemcpyHtoD(dp,h,n)); double hd=n/(now()-t0)/1e9; t0=now(); CK(cuMemcpyDtoH(h,dp,n)); printf("pinned H2D %.1f D2H %.1f GB/s\n",hd,n/(now()-t0)/1e9);}
 t0=now(); CK(cuMemcpyHtoD(dp,a,n)); printf("pageable H2D %.1f GB/s\n",n/(now()-t0)/1e9);
 t0=now(); CK(cuMemcpyDtoH(b,dp,n)); printf("pageable D2H (warm dst) %.1f GB/s\n",n/(now()-t0)/1e9);
 for(int i=0;i<5;i++) printf("pread pagecache->pinned T=%d: %.1f GB/s\n",Ts[i],par(1,Ts[i],h,0,n,fd));
 for(int i=2;i<5;i++) printf("memcpy warm->pinned T=%d: %.1f GB/s\n",Ts[i],par(0,Ts[i],h,a,n,0));
 // registered mmap of the file
 char*m=mmap(0,n,PROT_READ,MAP_SHARED|MAP_POPULATE,fd,0); t0=now(); CUresult rr=cuMemHostRegister(m,n,CU_MEMHOSTREGISTER_READ_ONLY); double reg=now()-t0;
 printf("cuMemHostRegister(mmap file, RO) -> %d in %.3f s\n",rr,reg);
 if(!rr){t0=now(); CK(cuMemcpyHtoD(dp,m,n)); printf("H2D from registered file mapping %.1f GB/s\n",n/(now()-t0)/1e9);}
 // zstd
 void*z=dlopen("libzstd.so.1",RTLD_NOW); printf("libzstd.so.1: %s\n",z?"present":"absent");
 if(z){size_t(*bound)(size_t)=dlsym(z,"ZSTD_compressBound"); size_t(*comp)(void*,size_t,const void*,size_t,int)=dlsym(z,"ZSTD_compress");
  float*f=(float*)a; for(size_t i=0;i<(64<<20)/4;i++) f[i]=(float)(i%1000)*0.37f+ (float)(rand()%100)*1e-3f;
  size_t cap=bound(4<<20); char*o=malloc(cap); int lv[]={-5,-1,1,3};
  for(int L=0;L<4;L++){t0=now(); size_t tot=0; for(size_t off=0;off<(64u<<20);off+=4<<20) tot+=comp(o,cap,a+off,4<<20,lv[L]); printf("zstd level %d: %.2f GB/s/thread ratio %.2f\n",lv[L],(64.0*(1<<20))/(now()-t0)/1e9,(64.0*(1<<20))/tot);}}
 return 0;}
