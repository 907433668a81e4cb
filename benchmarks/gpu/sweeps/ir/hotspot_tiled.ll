; ModuleID = 'tests/data/contracts/hotspot_tiled.cu'
source_filename = "tests/data/contracts/hotspot_tiled.cu"
target datalayout = "e-i64:64-i128:128-v16:16-v32:32-n16:32:64"
target triple = "nvptx64-nvidia-cuda"

%struct.__cuda_builtin_threadIdx_t = type { i8 }
%struct.__cuda_builtin_blockIdx_t = type { i8 }

$_ZN26__cuda_builtin_threadIdx_t17__fetch_builtin_xEv = comdat any

$_ZN26__cuda_builtin_threadIdx_t17__fetch_builtin_yEv = comdat any

$_ZN25__cuda_builtin_blockIdx_t17__fetch_builtin_xEv = comdat any

$_ZN25__cuda_builtin_blockIdx_t17__fetch_builtin_yEv = comdat any

@_ZZ13hotspot_tiledE1t = internal addrspace(3) global [18 x [18 x float]] undef, align 4
@threadIdx = extern_weak dso_local addrspace(1) global %struct.__cuda_builtin_threadIdx_t, align 1
@blockIdx = extern_weak dso_local addrspace(1) global %struct.__cuda_builtin_blockIdx_t, align 1

; Function Attrs: convergent mustprogress norecurse nounwind
define dso_local void @hotspot_tiled(ptr noundef %0, ptr noundef %1, ptr noundef %2, i32 noundef %3, i32 noundef %4, float noundef %5, float noundef %6, float noundef %7, float noundef %8, float noundef %9) #0 {
  %11 = alloca ptr, align 8
  %12 = alloca ptr, align 8
  %13 = alloca ptr, align 8
  %14 = alloca i32, align 4
  %15 = alloca i32, align 4
  %16 = alloca float, align 4
  %17 = alloca float, align 4
  %18 = alloca float, align 4
  %19 = alloca float, align 4
  %20 = alloca float, align 4
  %21 = alloca i32, align 4
  %22 = alloca i32, align 4
  %23 = alloca i32, align 4
  %24 = alloca i32, align 4
  %25 = alloca i32, align 4
  %26 = alloca i32, align 4
  %27 = alloca float, align 4
  %28 = alloca float, align 4
  store ptr %0, ptr %11, align 8, !tbaa !8
  store ptr %1, ptr %12, align 8, !tbaa !8
  store ptr %2, ptr %13, align 8, !tbaa !8
  store i32 %3, ptr %14, align 4, !tbaa !12
  store i32 %4, ptr %15, align 4, !tbaa !12
  store float %5, ptr %16, align 4, !tbaa !14
  store float %6, ptr %17, align 4, !tbaa !14
  store float %7, ptr %18, align 4, !tbaa !14
  store float %8, ptr %19, align 4, !tbaa !14
  store float %9, ptr %20, align 4, !tbaa !14
  call void @llvm.lifetime.start.p0(i64 4, ptr %21) #6
  %29 = call noundef i32 @_ZN26__cuda_builtin_threadIdx_t17__fetch_builtin_xEv() #7
  store i32 %29, ptr %21, align 4, !tbaa !12
  call void @llvm.lifetime.start.p0(i64 4, ptr %22) #6
  %30 = call noundef i32 @_ZN26__cuda_builtin_threadIdx_t17__fetch_builtin_yEv() #7
  store i32 %30, ptr %22, align 4, !tbaa !12
  call void @llvm.lifetime.start.p0(i64 4, ptr %23) #6
  %31 = call noundef i32 @_ZN25__cuda_builtin_blockIdx_t17__fetch_builtin_xEv() #7
  %32 = mul i32 %31, 16
  %33 = load i32, ptr %21, align 4, !tbaa !12
  %34 = add i32 %32, %33
  store i32 %34, ptr %23, align 4, !tbaa !12
  call void @llvm.lifetime.start.p0(i64 4, ptr %24) #6
  %35 = call noundef i32 @_ZN25__cuda_builtin_blockIdx_t17__fetch_builtin_yEv() #7
  %36 = mul i32 %35, 16
  %37 = load i32, ptr %22, align 4, !tbaa !12
  %38 = add i32 %36, %37
  store i32 %38, ptr %24, align 4, !tbaa !12
  call void @llvm.lifetime.start.p0(i64 4, ptr %25) #6
  %39 = load i32, ptr %23, align 4, !tbaa !12
  %40 = call noundef i32 @_ZL3maxii(i32 noundef %39, i32 noundef 0) #7
  %41 = load i32, ptr %15, align 4, !tbaa !12
  %42 = sub nsw i32 %41, 1
  %43 = call noundef i32 @_ZL3minii(i32 noundef %40, i32 noundef %42) #7
  store i32 %43, ptr %25, align 4, !tbaa !12
  call void @llvm.lifetime.start.p0(i64 4, ptr %26) #6
  %44 = load i32, ptr %24, align 4, !tbaa !12
  %45 = call noundef i32 @_ZL3maxii(i32 noundef %44, i32 noundef 0) #7
  %46 = load i32, ptr %14, align 4, !tbaa !12
  %47 = sub nsw i32 %46, 1
  %48 = call noundef i32 @_ZL3minii(i32 noundef %45, i32 noundef %47) #7
  store i32 %48, ptr %26, align 4, !tbaa !12
  %49 = load ptr, ptr %12, align 8, !tbaa !8
  %50 = load i32, ptr %26, align 4, !tbaa !12
  %51 = load i32, ptr %15, align 4, !tbaa !12
  %52 = mul nsw i32 %50, %51
  %53 = load i32, ptr %25, align 4, !tbaa !12
  %54 = add nsw i32 %52, %53
  %55 = sext i32 %54 to i64
  %56 = getelementptr inbounds float, ptr %49, i64 %55
  %57 = load float, ptr %56, align 4, !tbaa !14
  %58 = load i32, ptr %22, align 4, !tbaa !12
  %59 = add nsw i32 %58, 1
  %60 = sext i32 %59 to i64
  %61 = getelementptr inbounds [18 x [18 x float]], ptr addrspacecast (ptr addrspace(3) @_ZZ13hotspot_tiledE1t to ptr), i64 0, i64 %60
  %62 = load i32, ptr %21, align 4, !tbaa !12
  %63 = add nsw i32 %62, 1
  %64 = sext i32 %63 to i64
  %65 = getelementptr inbounds [18 x float], ptr %61, i64 0, i64 %64
  store float %57, ptr %65, align 4, !tbaa !14
  %66 = load i32, ptr %21, align 4, !tbaa !12
  %67 = icmp eq i32 %66, 0
  br i1 %67, label %68, label %85

68:                                               ; preds = %10
  %69 = load ptr, ptr %12, align 8, !tbaa !8
  %70 = load i32, ptr %26, align 4, !tbaa !12
  %71 = load i32, ptr %15, align 4, !tbaa !12
  %72 = mul nsw i32 %70, %71
  %73 = load i32, ptr %25, align 4, !tbaa !12
  %74 = sub nsw i32 %73, 1
  %75 = call noundef i32 @_ZL3maxii(i32 noundef %74, i32 noundef 0) #7
  %76 = add nsw i32 %72, %75
  %77 = sext i32 %76 to i64
  %78 = getelementptr inbounds float, ptr %69, i64 %77
  %79 = load float, ptr %78, align 4, !tbaa !14
  %80 = load i32, ptr %22, align 4, !tbaa !12
  %81 = add nsw i32 %80, 1
  %82 = sext i32 %81 to i64
  %83 = getelementptr inbounds [18 x [18 x float]], ptr addrspacecast (ptr addrspace(3) @_ZZ13hotspot_tiledE1t to ptr), i64 0, i64 %82
  %84 = getelementptr inbounds [18 x float], ptr %83, i64 0, i64 0
  store float %79, ptr %84, align 4, !tbaa !14
  br label %85

85:                                               ; preds = %68, %10
  %86 = load i32, ptr %21, align 4, !tbaa !12
  %87 = icmp eq i32 %86, 15
  br i1 %87, label %88, label %107

88:                                               ; preds = %85
  %89 = load ptr, ptr %12, align 8, !tbaa !8
  %90 = load i32, ptr %26, align 4, !tbaa !12
  %91 = load i32, ptr %15, align 4, !tbaa !12
  %92 = mul nsw i32 %90, %91
  %93 = load i32, ptr %25, align 4, !tbaa !12
  %94 = add nsw i32 %93, 1
  %95 = load i32, ptr %15, align 4, !tbaa !12
  %96 = sub nsw i32 %95, 1
  %97 = call noundef i32 @_ZL3minii(i32 noundef %94, i32 noundef %96) #7
  %98 = add nsw i32 %92, %97
  %99 = sext i32 %98 to i64
  %100 = getelementptr inbounds float, ptr %89, i64 %99
  %101 = load float, ptr %100, align 4, !tbaa !14
  %102 = load i32, ptr %22, align 4, !tbaa !12
  %103 = add nsw i32 %102, 1
  %104 = sext i32 %103 to i64
  %105 = getelementptr inbounds [18 x [18 x float]], ptr addrspacecast (ptr addrspace(3) @_ZZ13hotspot_tiledE1t to ptr), i64 0, i64 %104
  %106 = getelementptr inbounds [18 x float], ptr %105, i64 0, i64 17
  store float %101, ptr %106, align 4, !tbaa !14
  br label %107

107:                                              ; preds = %88, %85
  %108 = load i32, ptr %22, align 4, !tbaa !12
  %109 = icmp eq i32 %108, 0
  br i1 %109, label %110, label %126

110:                                              ; preds = %107
  %111 = load ptr, ptr %12, align 8, !tbaa !8
  %112 = load i32, ptr %26, align 4, !tbaa !12
  %113 = sub nsw i32 %112, 1
  %114 = call noundef i32 @_ZL3maxii(i32 noundef %113, i32 noundef 0) #7
  %115 = load i32, ptr %15, align 4, !tbaa !12
  %116 = mul nsw i32 %114, %115
  %117 = load i32, ptr %25, align 4, !tbaa !12
  %118 = add nsw i32 %116, %117
  %119 = sext i32 %118 to i64
  %120 = getelementptr inbounds float, ptr %111, i64 %119
  %121 = load float, ptr %120, align 4, !tbaa !14
  %122 = load i32, ptr %21, align 4, !tbaa !12
  %123 = add nsw i32 %122, 1
  %124 = sext i32 %123 to i64
  %125 = getelementptr inbounds [18 x float], ptr addrspacecast (ptr addrspace(3) @_ZZ13hotspot_tiledE1t to ptr), i64 0, i64 %124
  store float %121, ptr %125, align 4, !tbaa !14
  br label %126

126:                                              ; preds = %110, %107
  %127 = load i32, ptr %22, align 4, !tbaa !12
  %128 = icmp eq i32 %127, 15
  br i1 %128, label %129, label %147

129:                                              ; preds = %126
  %130 = load ptr, ptr %12, align 8, !tbaa !8
  %131 = load i32, ptr %26, align 4, !tbaa !12
  %132 = add nsw i32 %131, 1
  %133 = load i32, ptr %14, align 4, !tbaa !12
  %134 = sub nsw i32 %133, 1
  %135 = call noundef i32 @_ZL3minii(i32 noundef %132, i32 noundef %134) #7
  %136 = load i32, ptr %15, align 4, !tbaa !12
  %137 = mul nsw i32 %135, %136
  %138 = load i32, ptr %25, align 4, !tbaa !12
  %139 = add nsw i32 %137, %138
  %140 = sext i32 %139 to i64
  %141 = getelementptr inbounds float, ptr %130, i64 %140
  %142 = load float, ptr %141, align 4, !tbaa !14
  %143 = load i32, ptr %21, align 4, !tbaa !12
  %144 = add nsw i32 %143, 1
  %145 = sext i32 %144 to i64
  %146 = getelementptr inbounds [18 x float], ptr getelementptr inbounds ([18 x [18 x float]], ptr addrspacecast (ptr addrspace(3) @_ZZ13hotspot_tiledE1t to ptr), i64 0, i64 17), i64 0, i64 %145
  store float %142, ptr %146, align 4, !tbaa !14
  br label %147

147:                                              ; preds = %129, %126
  call void @llvm.nvvm.barrier0()
  %148 = load i32, ptr %23, align 4, !tbaa !12
  %149 = load i32, ptr %15, align 4, !tbaa !12
  %150 = icmp slt i32 %148, %149
  br i1 %150, label %151, label %241

151:                                              ; preds = %147
  %152 = load i32, ptr %24, align 4, !tbaa !12
  %153 = load i32, ptr %14, align 4, !tbaa !12
  %154 = icmp slt i32 %152, %153
  br i1 %154, label %155, label %241

155:                                              ; preds = %151
  call void @llvm.lifetime.start.p0(i64 4, ptr %27) #6
  %156 = load i32, ptr %22, align 4, !tbaa !12
  %157 = add nsw i32 %156, 1
  %158 = sext i32 %157 to i64
  %159 = getelementptr inbounds [18 x [18 x float]], ptr addrspacecast (ptr addrspace(3) @_ZZ13hotspot_tiledE1t to ptr), i64 0, i64 %158
  %160 = load i32, ptr %21, align 4, !tbaa !12
  %161 = add nsw i32 %160, 1
  %162 = sext i32 %161 to i64
  %163 = getelementptr inbounds [18 x float], ptr %159, i64 0, i64 %162
  %164 = load float, ptr %163, align 4, !tbaa !14
  store float %164, ptr %27, align 4, !tbaa !14
  call void @llvm.lifetime.start.p0(i64 4, ptr %28) #6
  %165 = load i32, ptr %22, align 4, !tbaa !12
  %166 = add nsw i32 %165, 2
  %167 = sext i32 %166 to i64
  %168 = getelementptr inbounds [18 x [18 x float]], ptr addrspacecast (ptr addrspace(3) @_ZZ13hotspot_tiledE1t to ptr), i64 0, i64 %167
  %169 = load i32, ptr %21, align 4, !tbaa !12
  %170 = add nsw i32 %169, 1
  %171 = sext i32 %170 to i64
  %172 = getelementptr inbounds [18 x float], ptr %168, i64 0, i64 %171
  %173 = load float, ptr %172, align 4, !tbaa !14
  %174 = load i32, ptr %22, align 4, !tbaa !12
  %175 = sext i32 %174 to i64
  %176 = getelementptr inbounds [18 x [18 x float]], ptr addrspacecast (ptr addrspace(3) @_ZZ13hotspot_tiledE1t to ptr), i64 0, i64 %175
  %177 = load i32, ptr %21, align 4, !tbaa !12
  %178 = add nsw i32 %177, 1
  %179 = sext i32 %178 to i64
  %180 = getelementptr inbounds [18 x float], ptr %176, i64 0, i64 %179
  %181 = load float, ptr %180, align 4, !tbaa !14
  %182 = fadd contract float %173, %181
  %183 = load float, ptr %27, align 4, !tbaa !14
  %184 = fmul contract float 2.000000e+00, %183
  %185 = fsub contract float %182, %184
  %186 = load float, ptr %18, align 4, !tbaa !14
  %187 = fmul contract float %185, %186
  %188 = load i32, ptr %22, align 4, !tbaa !12
  %189 = add nsw i32 %188, 1
  %190 = sext i32 %189 to i64
  %191 = getelementptr inbounds [18 x [18 x float]], ptr addrspacecast (ptr addrspace(3) @_ZZ13hotspot_tiledE1t to ptr), i64 0, i64 %190
  %192 = load i32, ptr %21, align 4, !tbaa !12
  %193 = add nsw i32 %192, 2
  %194 = sext i32 %193 to i64
  %195 = getelementptr inbounds [18 x float], ptr %191, i64 0, i64 %194
  %196 = load float, ptr %195, align 4, !tbaa !14
  %197 = load i32, ptr %22, align 4, !tbaa !12
  %198 = add nsw i32 %197, 1
  %199 = sext i32 %198 to i64
  %200 = getelementptr inbounds [18 x [18 x float]], ptr addrspacecast (ptr addrspace(3) @_ZZ13hotspot_tiledE1t to ptr), i64 0, i64 %199
  %201 = load i32, ptr %21, align 4, !tbaa !12
  %202 = sext i32 %201 to i64
  %203 = getelementptr inbounds [18 x float], ptr %200, i64 0, i64 %202
  %204 = load float, ptr %203, align 4, !tbaa !14
  %205 = fadd contract float %196, %204
  %206 = load float, ptr %27, align 4, !tbaa !14
  %207 = fmul contract float 2.000000e+00, %206
  %208 = fsub contract float %205, %207
  %209 = load float, ptr %17, align 4, !tbaa !14
  %210 = fmul contract float %208, %209
  %211 = fadd contract float %187, %210
  %212 = load float, ptr %20, align 4, !tbaa !14
  %213 = load float, ptr %27, align 4, !tbaa !14
  %214 = fsub contract float %212, %213
  %215 = load float, ptr %19, align 4, !tbaa !14
  %216 = fmul contract float %214, %215
  %217 = fadd contract float %211, %216
  store float %217, ptr %28, align 4, !tbaa !14
  %218 = load float, ptr %27, align 4, !tbaa !14
  %219 = load float, ptr %16, align 4, !tbaa !14
  %220 = load ptr, ptr %11, align 8, !tbaa !8
  %221 = load i32, ptr %24, align 4, !tbaa !12
  %222 = load i32, ptr %15, align 4, !tbaa !12
  %223 = mul nsw i32 %221, %222
  %224 = load i32, ptr %23, align 4, !tbaa !12
  %225 = add nsw i32 %223, %224
  %226 = sext i32 %225 to i64
  %227 = getelementptr inbounds float, ptr %220, i64 %226
  %228 = load float, ptr %227, align 4, !tbaa !14
  %229 = load float, ptr %28, align 4, !tbaa !14
  %230 = fadd contract float %228, %229
  %231 = fmul contract float %219, %230
  %232 = fadd contract float %218, %231
  %233 = load ptr, ptr %13, align 8, !tbaa !8
  %234 = load i32, ptr %24, align 4, !tbaa !12
  %235 = load i32, ptr %15, align 4, !tbaa !12
  %236 = mul nsw i32 %234, %235
  %237 = load i32, ptr %23, align 4, !tbaa !12
  %238 = add nsw i32 %236, %237
  %239 = sext i32 %238 to i64
  %240 = getelementptr inbounds float, ptr %233, i64 %239
  store float %232, ptr %240, align 4, !tbaa !14
  call void @llvm.lifetime.end.p0(i64 4, ptr %28) #6
  call void @llvm.lifetime.end.p0(i64 4, ptr %27) #6
  br label %241

241:                                              ; preds = %155, %151, %147
  call void @llvm.lifetime.end.p0(i64 4, ptr %26) #6
  call void @llvm.lifetime.end.p0(i64 4, ptr %25) #6
  call void @llvm.lifetime.end.p0(i64 4, ptr %24) #6
  call void @llvm.lifetime.end.p0(i64 4, ptr %23) #6
  call void @llvm.lifetime.end.p0(i64 4, ptr %22) #6
  call void @llvm.lifetime.end.p0(i64 4, ptr %21) #6
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
define linkonce_odr dso_local noundef i32 @_ZN26__cuda_builtin_threadIdx_t17__fetch_builtin_yEv() #2 comdat align 2 {
  %1 = call i32 @llvm.nvvm.read.ptx.sreg.tid.y()
  ret i32 %1
}

; Function Attrs: alwaysinline convergent mustprogress nounwind
define linkonce_odr dso_local noundef i32 @_ZN25__cuda_builtin_blockIdx_t17__fetch_builtin_xEv() #2 comdat align 2 {
  %1 = call i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()
  ret i32 %1
}

; Function Attrs: alwaysinline convergent mustprogress nounwind
define linkonce_odr dso_local noundef i32 @_ZN25__cuda_builtin_blockIdx_t17__fetch_builtin_yEv() #2 comdat align 2 {
  %1 = call i32 @llvm.nvvm.read.ptx.sreg.ctaid.y()
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
declare noundef i32 @llvm.nvvm.read.ptx.sreg.tid.y() #4

; Function Attrs: nocallback nofree nosync nounwind speculatable willreturn memory(none)
declare noundef i32 @llvm.nvvm.read.ptx.sreg.ctaid.x() #4

; Function Attrs: nocallback nofree nosync nounwind speculatable willreturn memory(none)
declare noundef i32 @llvm.nvvm.read.ptx.sreg.ctaid.y() #4

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
!4 = !{ptr @hotspot_tiled, !"kernel", i32 1}
!5 = !{!"Debian clang version 19.1.7 (3~deb12u1)"}
!6 = !{!"clang version 3.8.0 (tags/RELEASE_380/final)"}
!7 = !{i32 2, i32 0}
!8 = !{!9, !9, i64 0}
!9 = !{!"any pointer", !10, i64 0}
!10 = !{!"omnipotent char", !11, i64 0}
!11 = !{!"Simple C++ TBAA"}
!12 = !{!13, !13, i64 0}
!13 = !{!"int", !10, i64 0}
!14 = !{!15, !15, i64 0}
!15 = !{!"float", !10, i64 0}
