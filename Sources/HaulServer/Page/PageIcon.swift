/// The page's icon (`GET /icon.svg`): an arrow into a tray.
enum PageIcon {
    static let text = #"""
        <svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 24 24" fill="none" stroke="#0a64d6" stroke-width="2.2" stroke-linecap="round" stroke-linejoin="round"><path d="M12 3v12"/><path d="M7 10l5 5 5-5"/><path d="M4 17v3h16v-3"/></svg>

        """#
}
