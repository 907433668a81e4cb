; ModuleID = 'tests/data/contracts/pathfinder_rows.cu'
source_filename = "tests/data/contracts/pathfinder_rows.cu"
target datalayout = "e-i64:64-i128:128-v16:16-v32:32-n16:32:64"
target triple = "nvptx64-nvidia-cuda"

%struct.__cuda_builtin_threadIdx_t = type { i8 }
%struct.__cuda_builtin_blockIdx_t = type { i8 }

$_ZN26__cuda_builtin_threadIdx_t17__fetch_builtin_xEv = comdat any

$_ZN25__cuda_builtin_blockIdx_t17__fetch_builtin_xEv = comdat any

@_ZZ15pathfinder_rowsE4cost = internal addrspace(3) global [258 x i32] undef, align 4
@threadIdx = extern_weak dso_local addrspace(1) global %struct.__cuda_builtin_threadIdx_t, align 1
@blockIdx = extern_weak dso_local addrspace(1) global %struct.__cuda_builtin_blockIdx_t, align 1

; Function Attrs: convergent mustprogress norecurse nounwind
define dso_local void @pathfinder_rows(ptr noundef %0, ptr noundef %1, ptr noundef %2, i32 noundef %3, i32 noundef %4) #0 {
  %6 = alloca ptr, align 8
  %7 = alloca ptr, align 8
  %8 = alloca ptr, align 8
  %9 = alloca i32, align 4
  %10 = alloca i32, align 4
  %11 = alloca i32, align 4
  %12 = alloca i32, align 4
  %13 = alloca i32, align 4
  %14 = alloca i32, align 4
  %15 = alloca i32, align 4
  store ptr %0, ptr %6, align 8, !tbaa !8
  store ptr %1, ptr %7, align 8, !tbaa !8
  store ptr %2, ptr %8, align 8, !tbaa !8
  store i32 %3, ptr %9, align 4, !tbaa !12
  store i32 %4, ptr %10, align 4, !tbaa !12
  call void @llvm.lifetime.start.p0(i64 4, ptr %11) #6
  %16 = call noundef i32 @_ZN26__cuda_builtin_threadIdx_t17__fetch_builtin_xEv() #7
  store i32 %16, ptr %11, align 4, !tbaa !12
  call void @llvm.lifetime.start.p0(i64 4, ptr %12) #6
  %17 = call noundef i32 @_ZN25__cuda_builtin_blockIdx_t17__fetch_builtin_xEv() #7
  %18 = mul i32 %17, 256
  %19 = load i32, ptr %11, align 4, !tbaa !12
  %20 = add i32 %18, %19
  store i32 %20, ptr %12, align 4, !tbaa !12
  call void @llvm.lifetime.start.p0(i64 4, ptr %13) #6
  %21 = load i32, ptr %12, align 4, !tbaa !12
  %22 = load i32, ptr %9, align 4, !tbaa !12
  %23 = sub nsw i32 %22, 1
  %24 = call noundef i32 @_ZL3minii(i32 noundef %21, i32 noundef %23) #7
  store i32 %24, ptr %13, align 4, !tbaa !12
  %25 = load ptr, ptr %7, align 8, !tbaa !8
  %26 = load i32, ptr %13, align 4, !tbaa !12
  %27 = sext i32 %26 to i64
  %28 = getelementptr inbounds i32, ptr %25, i64 %27
  %29 = load i32, ptr %28, align 4, !tbaa !12
  %30 = load i32, ptr %11, align 4, !tbaa !12
  %31 = add nsw i32 %30, 1
  %32 = sext i32 %31 to i64
  %33 = getelementptr inbounds [258 x i32], ptr addrspacecast (ptr addrspace(3) @_ZZ15pathfinder_rowsE4cost to ptr), i64 0, i64 %32
  store i32 %29, ptr %33, align 4, !tbaa !12
  %34 = load i32, ptr %11, align 4, !tbaa !12
  %35 = icmp eq i32 %34, 0
  br i1 %35, label %36, label %44

36:                                               ; preds = %5
  %37 = load ptr, ptr %7, align 8, !tbaa !8
  %38 = load i32, ptr %13, align 4, !tbaa !12
  %39 = sub nsw i32 %38, 1
  %40 = call noundef i32 @_ZL3maxii(i32 noundef %39, i32 noundef 0) #7
  %41 = sext i32 %40 to i64
  %42 = getelementptr inbounds i32, ptr %37, i64 %41
  %43 = load i32, ptr %42, align 4, !tbaa !12
  store i32 %43, ptr addrspacecast (ptr addrspace(3) @_ZZ15pathfinder_rowsE4cost to ptr), align 4, !tbaa !12
  br label %44

44:                                               ; preds = %36, %5
  %45 = load i32, ptr %11, align 4, !tbaa !12
  %46 = icmp eq i32 %45, 255
  br i1 %46, label %47, label %57

47:                                               ; preds = %44
  %48 = load ptr, ptr %7, align 8, !tbaa !8
  %49 = load i32, ptr %13, align 4, !tbaa !12
  %50 = add nsw i32 %49, 1
  %51 = load i32, ptr %9, align 4, !tbaa !12
  %52 = sub nsw i32 %51, 1
  %53 = call noundef i32 @_ZL3minii(i32 noundef %50, i32 noundef %52) #7
  %54 = sext i32 %53 to i64
  %55 = getelementptr inbounds i32, ptr %48, i64 %54
  %56 = load i32, ptr %55, align 4, !tbaa !12
  store i32 %56, ptr getelementptr inbounds ([258 x i32], ptr addrspacecast (ptr addrspace(3) @_ZZ15pathfinder_rowsE4cost to ptr), i64 0, i64 257), align 4, !tbaa !12
  br label %57

57:                                               ; preds = %47, %44
  call void @llvm.nvvm.barrier0()
  call void @llvm.lifetime.start.p0(i64 4, ptr %14) #6
  store i32 0, ptr %14, align 4, !tbaa !12
  br label %58

58:                                               ; preds = %106, %57
  %59 = load i32, ptr %14, align 4, !tbaa !12
  %60 = icmp slt i32 %59, 4
  br i1 %60, label %62, label %61

61:                                               ; preds = %58
  call void @llvm.lifetime.end.p0(i64 4, ptr %14) #6
  br label %109

62:                                               ; preds = %58
  call void @llvm.lifetime.start.p0(i64 4, ptr %15) #6
  %63 = load i32, ptr %11, align 4, !tbaa !12
  %64 = sext i32 %63 to i64
  %65 = getelementptr inbounds [258 x i32], ptr addrspacecast (ptr addrspace(3) @_ZZ15pathfinder_rowsE4cost to ptr), i64 0, i64 %64
  %66 = load i32, ptr %65, align 4, !tbaa !12
  %67 = load i32, ptr %11, align 4, !tbaa !12
  %68 = add nsw i32 %67, 1
  %69 = sext i32 %68 to i64
  %70 = getelementptr inbounds [258 x i32], ptr addrspacecast (ptr addrspace(3) @_ZZ15pathfinder_rowsE4cost to ptr), i64 0, i64 %69
  %71 = load i32, ptr %70, align 4, !tbaa !12
  %72 = load i32, ptr %11, align 4, !tbaa !12
  %73 = add nsw i32 %72, 2
  %74 = sext i32 %73 to i64
  %75 = getelementptr inbounds [258 x i32], ptr addrspacecast (ptr addrspace(3) @_ZZ15pathfinder_rowsE4cost to ptr), i64 0, i64 %74
  %76 = load i32, ptr %75, align 4, !tbaa !12
  %77 = call noundef i32 @_ZL3minii(i32 noundef %71, i32 noundef %76) #7
  %78 = call noundef i32 @_ZL3minii(i32 noundef %66, i32 noundef %77) #7
  %79 = load ptr, ptr %6, align 8, !tbaa !8
  %80 = load i32, ptr %10, align 4, !tbaa !12
  %81 = load i32, ptr %14, align 4, !tbaa !12
  %82 = add nsw i32 %80, %81
  %83 = load i32, ptr %9, align 4, !tbaa !12
  %84 = mul nsw i32 %82, %83
  %85 = load i32, ptr %13, align 4, !tbaa !12
  %86 = add nsw i32 %84, %85
  %87 = sext i32 %86 to i64
  %88 = getelementptr inbounds i32, ptr %79, i64 %87
  %89 = load i32, ptr %88, align 4, !tbaa !12
  %90 = add nsw i32 %78, %89
  store i32 %90, ptr %15, align 4, !tbaa !12
  call void @llvm.nvvm.barrier0()
  %91 = load i32, ptr %15, align 4, !tbaa !12
  %92 = load i32, ptr %11, align 4, !tbaa !12
  %93 = add nsw i32 %92, 1
  %94 = sext i32 %93 to i64
  %95 = getelementptr inbounds [258 x i32], ptr addrspacecast (ptr addrspace(3) @_ZZ15pathfinder_rowsE4cost to ptr), i64 0, i64 %94
  store i32 %91, ptr %95, align 4, !tbaa !12
  %96 = load i32, ptr %11, align 4, !tbaa !12
  %97 = icmp eq i32 %96, 0
  br i1 %97, label %98, label %100

98:                                               ; preds = %62
  %99 = load i32, ptr %15, align 4, !tbaa !12
  store i32 %99, ptr addrspacecast (ptr addrspace(3) @_ZZ15pathfinder_rowsE4cost to ptr), align 4, !tbaa !12
  br label %100

100:                                              ; preds = %98, %62
  %101 = load i32, ptr %11, align 4, !tbaa !12
  %102 = icmp eq i32 %101, 255
  br i1 %102, label %103, label %105

103:                                              ; preds = %100
  %104 = load i32, ptr %15, align 4, !tbaa !12
  store i32 %104, ptr getelementptr inbounds ([258 x i32], ptr addrspacecast (ptr addrspace(3) @_ZZ15pathfinder_rowsE4cost to ptr), i64 0, i64 257), align 4, !tbaa !12
  br label %105

105:                                              ; preds = %103, %100
  call void @llvm.nvvm.barrier0()
  call void @llvm.lifetime.end.p0(i64 4, ptr %15) #6
  br label %106

106:                                              ; preds = %105
  %107 = load i32, ptr %14, align 4, !tbaa !12
  %108 = add nsw i32 %107, 1
  store i32 %108, ptr %14, align 4, !tbaa !12
  br label %58, !llvm.loop !14

109:                                              ; preds = %61
  %110 = load i32, ptr %12, align 4, !tbaa !12
  %111 = load i32, ptr %9, align 4, !tbaa !12
  %112 = icmp slt i32 %110, %111
  br i1 %112, label %113, label %123

113:                                              ; preds = %109
  %114 = load i32, ptr %11, align 4, !tbaa !12
  %115 = add nsw i32 %114, 1
  %116 = sext i32 %115 to i64
  %117 = getelementptr inbounds [258 x i32], ptr addrspacecast (ptr addrspace(3) @_ZZ15pathfinder_rowsE4cost to ptr), i64 0, i64 %116
  %118 = load i32, ptr %117, align 4, !tbaa !12
  %119 = load ptr, ptr %8, align 8, !tbaa !8
  %120 = load i32, ptr %12, align 4, !tbaa !12
  %121 = sext i32 %120 to i64
  %122 = getelementptr inbounds i32, ptr %119, i64 %121
  store i32 %118, ptr %122, align 4, !tbaa !12
  br label %123

123:                                              ; preds = %113, %109
  call void @llvm.lifetime.end.p0(i64 4, ptr %13) #6
  call void @llvm.lifetime.end.p0(i64 4, ptr %12) #6
  call void @llvm.lifetime.end.p0(i64 4, ptr %11) #6
  ret void
}

; Function Attrs: nocallback nofree nosync nounwind willreturn memory(argmem: readwrite)
declare void @llvm.lifetime.start.p0(i64 immarg, ptr nocapture) #1

; Function Attrs: alwaysinline convergent mustprogress nounwind
define linkonce_odr dso_local noundef i32 @_ZN26__cuda_builtin_threadIdx_t17__fetch_builtin_xEv() #2 comdat align 2 {
  %1 = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  ret i32 %1
}

; Function Attrs: alwaysinline convergent mustprogress nounwind
define linkonce_odr dso_local noundef i32 @_ZN25__cuda_builtin_blockIdx_t17__fetch_builtin_xEv() #2 comdat align 2 {
  %1 = call i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()
  ret i32 %1
}

; Function Attrs: alwaysinline convergent mustprogress nounwind
define internal noundef i32 @_ZL3minii(i32 noundef %0, i32 noundef %1) #2 {
  %3 = alloca i32, align 4
  %4 = alloca i32, align 4
  store i32 %0, ptr %3, align 4, !tbaa !12
  store i32 %1, ptr %4, align 4, !tbaa !12
  %5 = load i32, ptr %3, align 4, !tbaa !12
  %6 = load i32, ptr %4, align 4, !tbaa !12
  %7 = call i32 @__nv_min(i32 noundef %5, i32 noundef %6) #7
  ret i32 %7
}

; Function Attrs: alwaysinline convergent mustprogress nounwind
define internal noundef i32 @_ZL3maxii(i32 noundef %0, i32 noundef %1) #2 {
  %3 = alloca i32, align 4
  %4 = alloca i32, align 4
  store i32 %0, ptr %3, align 4, !tbaa !12
  store i32 %1, ptr %4, align 4, !tbaa !12
  %5 = load i32, ptr %3, align 4, !tbaa !12
  %6 = load i32, ptr %4, align 4, !tbaa !12
  %7 = call i32 @__nv_max(i32 noundef %5, i32 noundef %6) #7
  ret i32 %7
}

; Function Attrs: convergent nocallback nounwind
declare void @llvm.nvvm.barrier0() #3

; Function Attrs: nocallback nofree nosync nounwind willreturn memory(argmem: readwrite)
declare void @llvm.lifetime.end.p0(i64 immarg, ptr nocapture) #1

; Function Attrs: nocallback nofree nosync nounwind speculatable willreturn memory(none)
declare noundef i32 @llvm.nvvm.read.ptx.sreg.tid.x() #4

; Function Attrs: nocallback nofree nosync nounwind speculatable willreturn memory(none)
declare noundef i32 @llvm.nvvm.read.ptx.sreg.ctaid.x() #4

; Function Attrs: alwaysinline convergent nounwind
define internal i32 @__nv_min(i32 %0, i32 %1) #5 {
  %3 = icmp sle i32 %0, %1
  %4 = select i1 %3, i32 %0, i32 %1
  ret i32 %4
}

; Function Attrs: alwaysinline convergent nounwind
define internal i32 @__nv_max(i32 %0, i32 %1) #5 {
  %3 = icmp sge i32 %0, %1
  %4 = select i1 %3, i32 %0, i32 %1
  ret i32 %4
}

attributes #0 = { convergent mustprogress norecurse nounwind "frame-pointer"="all" "no-trapping-math"="true" "stack-protector-buffer-size"="8" "target-cpu"="sm_90" "target-features"="+ptx85,+sm_90" "uniform-work-group-size"="true" }
attributes #1 = { nocallback nofree nosync nounwind willreturn memory(argmem: readwrite) }
attributes #2 = { alwaysinline convergent mustprogress nounwind "frame-pointer"="all" "no-trapping-math"="true" "stack-protector-buffer-size"="8" "target-cpu"="sm_90" "target-features"="+ptx85,+sm_90" }
attributes #3 = { convergent nocallback nounwind }
attributes #4 = { nocallback nofree nosync nounwind speculatable willreturn memory(none) }
attributes #5 = { alwaysinline convergent nounwind "disable-tail-calls"="false" "frame-pointer"="all" "less-precise-fpmad"="false" "no-infs-fp-math"="false" "no-nans-fp-math"="false" "no-trapping-math"="true" "stack-protector-buffer-size"="8" "target-cpu"="sm_90" "target-features"="+ptx85,+sm_90" "unsafe-fp-math"="false" "use-soft-float"="false" }
attributes #6 = { nounwind }
attributes #7 = { convergent nounwind }

!llvm.module.flags = !{!0, !1, !2, !3}
!nvvm.annotations = !{!4}
!llvm.ident = !{!5, !6}
!nvvmir.version = !{!7}

!0 = !{i32 2, !"SDK Version", [2 x i32] [i32 12, i32 5]}
!1 = !{i32 1, !"wchar_size", i32 4}
!2 = !{i32 4, !"nvvm-reflect-ftz", i32 0}
!3 = !{i32 7, !"frame-pointer", i32 2}
!4 = !{ptr @pathfinder_rows, !"kernel", i32 1}
!5 = !{!"Debian clang version 19.1.7 (3~deb12u1)"}
!6 = !{!"clang version 3.8.0 (tags/RELEASE_380/final)"}
!7 = !{i32 2, i32 0}
!8 = !{!9, !9, i64 0}
!9 = !{!"any pointer", !10, i64 0}
!10 = !{!"omnipotent char", !11, i64 0}
!11 = !{!"Simple C++ TBAA"}
!12 = !{!13, !13, i64 0}
!13 = !{!"int", !10, i64 0}
!14 = distinct !{!14, !15}
!15 = !{!"llvm.loop.mustprogress"}
