import { defineConfig } from "vite";
import react from "@vitejs/plugin-react";

// base "./": the built page works from any static server path.
export default defineConfig({
  plugins: [react()],
  base: "./",
  build: { chunkSizeWarningLimit: 2000 }, // one bundle is fine for a test page
});
